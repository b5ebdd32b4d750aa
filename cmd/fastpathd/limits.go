package main

import (
	"flag"

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
