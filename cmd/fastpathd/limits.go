package main

import (
	"flag"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// limitOptions are the flags bounding what one pod may select
// (npwg.Limits).
type limitOptions struct {
	maxNetworks, maxInterfaces int
}

func (o *limitOptions) addFlags(fs *flag.FlagSet) {
	fs.IntVar(&o.maxNetworks, "npwg-max-networks", npwg.DefaultMaxNetworks, "how many networks a pod may select, with k8s.v1.cni.cncf.io/networks and "+
		pnv1.AnnotationNetworks+" together: a pod selecting more fails its sandbox before any network is read, recorded or added")
	fs.IntVar(&o.maxInterfaces, "npwg-max-interfaces", npwg.DefaultMaxInterfaces, "how many interfaces a pod that selects networks may have of fastpath: "+
		"those of its DRA claims and its selected networks together")
}

func (o *limitOptions) validate() error {
	if o.maxNetworks < 1 || o.maxInterfaces < 1 {
		return usagef("run: --npwg-max-networks %d, --npwg-max-interfaces %d: must be at least 1", o.maxNetworks, o.maxInterfaces)
	}
	return nil
}

func (o *limitOptions) limits() npwg.Limits {
	return npwg.Limits{Networks: o.maxNetworks, Interfaces: o.maxInterfaces}
}

// limitProblems checks a pod's selected networks, and those and its
// claims' interfaces (claimIfaces) together, against the default limits,
// as a node with the default flags does at the pod's sandbox creation.
// Annotations that do not parse are left to the checks that say why.
func limitProblems(namespace string, pod *corev1.Pod, claimIfaces int) field.ErrorList {
	var selected, podNetworks int
	if value := pod.Annotations[nadv1.NetworkAttachmentAnnot]; strings.TrimSpace(value) != "" {
		atts, errs := npwg.ParseNetworks(namespace, value)
		if len(errs) > 0 {
			return nil
		}
		selected = len(atts)
	}
	if _, ok := pod.Annotations[pnv1.AnnotationNetworks]; ok {
		nets, errs := pnv1.PodNetworks(pod.Annotations, pod.Spec.HostNetwork)
		if len(errs) > 0 {
			return nil
		}
		for _, n := range nets {
			if n.PodNetworkName != pnv1.DefaultPodNetworkName {
				podNetworks++
			}
		}
	}
	return npwg.Limits{}.Check(selected, podNetworks, claimIfaces)
}
