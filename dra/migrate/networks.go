package migrate

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// ClassName is the DeviceClass of an operator resource:
// openshift.io/intel_nics is intel-nics.sriov.fastpath.dev.
func ClassName(resourceName string) string {
	_, name, _ := strings.Cut(resourceName, "/")
	return dnsLabel(name) + ".sriov." + devices.DriverName
}

func createdBy() map[string]string { return map[string]string{Label: "fastpathd-migrate"} }

// classes makes a DeviceClass of each operator resource: its devices are
// those of its resource name, and a pod that asks for the resource as an
// extended resource (written for the device plugin) gets one of them.
func (c *converter) classes() []*resourceapi.DeviceClass {
	var out []*resourceapi.DeviceClass
	taken := map[string]string{}
	for _, r := range c.resources {
		name := ClassName(r.name)
		if other, ok := taken[name]; ok {
			c.r.add(r.from, "spec.resourceName", fmt.Sprintf("resources %s and %s would both have DeviceClass %s: none is written for %s; rename one", other, r.name, name, r.name))
			continue
		}
		taken[name] = r.name
		// delegate: the device stays as it is, and the
		// NetworkAttachmentDefinition's sriov-cni moves it, as with the
		// device plugin and Multus; vfio: the pod gets /dev/vfio, which
		// mode delegate does not give.
		mode := v1alpha1.ModeDelegate
		if r.driver == "vfio-pci" {
			mode = v1alpha1.ModeVFIO
		}
		params, _ := json.Marshal(v1alpha1.InterfaceConfig{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindInterfaceConfig,
			Mode: mode, Pinned: []string{"mode"}}) // a config always marshals
		out = append(out, &resourceapi.DeviceClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: createdBy()},
			Spec: resourceapi.DeviceClassSpec{
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf(
					`device.driver == %q && device.attributes[%q].resourceName == %q`, devices.DriverName, "k8s.cni.cncf.io", r.name)}}},
				Config: []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
					Driver: devices.DriverName, Parameters: runtime.RawExtension{Raw: params}}}}},
				ExtendedResourceName: new(r.name),
			},
		})
	}
	return out
}

// sriovCNI is sriov-cni's (and ib-sriov-cni's) configuration as the
// operator renders it, in its order.
type sriovCNI struct {
	CNIVersion   string          `json:"cniVersion,omitempty"`
	Name         string          `json:"name,omitempty"`
	Type         string          `json:"type"`
	Vlan         *int            `json:"vlan,omitempty"`
	SpoofChk     string          `json:"spoofchk,omitempty"`
	Trust        string          `json:"trust,omitempty"`
	VlanQoS      *int            `json:"vlanQoS,omitempty"`
	VlanProto    string          `json:"vlanProto,omitempty"`
	MinTxRate    *int            `json:"min_tx_rate,omitempty"`
	MaxTxRate    *int            `json:"max_tx_rate,omitempty"`
	Capabilities json.RawMessage `json:"capabilities,omitempty"`
	LinkState    string          `json:"link_state,omitempty"`
	LogLevel     string          `json:"logLevel,omitempty"`
	LogFile      string          `json:"logFile,omitempty"`
	IPAM         json.RawMessage `json:"ipam"`
}

// network is what SriovNetwork and SriovIBNetwork have in common.
type network struct {
	at                     ref
	meta                   metav1.ObjectMeta
	namespace, resource    string
	capabilities, ipam     string
	metaPlugins, linkState string
}

// networks makes the NetworkAttachmentDefinition the operator renders of
// each network, and a ResourceClaimTemplate of a VF for it.
func (c *converter) networks(nets []*sriovNetwork, ibs []*sriovIBNetwork) ([]*nadv1.NetworkAttachmentDefinition, []*resourceapi.ResourceClaimTemplate) {
	var nads []*nadv1.NetworkAttachmentDefinition
	var rcts []*resourceapi.ResourceClaimTemplate
	add := func(n network, plugin sriovCNI, vf *v1alpha1.VFConfig) {
		class := ClassName(n.resource)
		res, known := c.resourceIndex[n.resource]
		if !known {
			c.r.add(n.at, "spec.resourceName", fmt.Sprintf("no SriovNetworkNodePolicy among the inputs gives resource %s: its DeviceClass %s is not written; convert the policy too", n.resource, class))
		}
		vfio := known && res.driver == "vfio-pci"
		plugin.LinkState = enum(c.r, n.at, "spec.linkState", n.linkState, "auto", "enable", "disable")
		plugin.Capabilities = c.jsonObject(n.at, "spec.capabilities", n.capabilities)
		plugin.IPAM = c.jsonObject(n.at, "spec.ipam", n.ipam)
		if plugin.IPAM == nil {
			plugin.IPAM = json.RawMessage("{}")
		}
		rct := &resourceapi.ResourceClaimTemplate{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceClaimTemplate"},
			ObjectMeta: metav1.ObjectMeta{Name: n.meta.Name, Namespace: n.namespace, Labels: createdBy()},
		}
		rct.Spec.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "vf", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}}
		if vfio {
			// A NetworkAttachmentDefinition takes only a device of mode
			// delegate, which gives no /dev/vfio: the network's VF
			// settings go into the claim's config instead.
			if vf != nil {
				params, _ := json.Marshal(v1alpha1.InterfaceConfig{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindInterfaceConfig, Mode: v1alpha1.ModeVFIO, VF: vf})
				rct.Spec.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"vf"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
					Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: devices.DriverName, Parameters: runtime.RawExtension{Raw: params}}}}}
			}
			c.r.add(n.at, "spec.resourceName", fmt.Sprintf("resource %s is vfio-pci: its VFs are claimed in mode vfio, which no NetworkAttachmentDefinition takes, so none is written; ResourceClaimTemplate %s/%s sets the network's VF settings (vlan, spoofChk, trust, rates, link state) in its config's vf; pods claim it and drop the network from k8s.v1.cni.cncf.io/networks (its ipam and metaPlugins have no use without a kernel interface)", n.resource, n.namespace, n.meta.Name))
			rcts = append(rcts, rct)
			return
		}
		cfg, err := c.cniConfig(n, plugin)
		if err != nil {
			c.r.add(n.at, "spec", fmt.Sprintf("its CNI configuration does not marshal: %v: left out", err))
			return
		}
		c.r.add(n.at, "", fmt.Sprintf("NetworkAttachmentDefinition %s/%s runs plugin types %s: the nodes attach it with fastpathd run --npwg (chart npwg.enabled) and those types on --cni-plugins (chart cni.plugins)", n.namespace, n.meta.Name, strings.Join(pluginTypes(cfg), ", ")))
		nads = append(nads, &nadv1.NetworkAttachmentDefinition{
			TypeMeta: metav1.TypeMeta{APIVersion: nadv1.SchemeGroupVersion.String(), Kind: "NetworkAttachmentDefinition"},
			ObjectMeta: metav1.ObjectMeta{Name: n.meta.Name, Namespace: n.namespace, Labels: createdBy(),
				Annotations: map[string]string{"k8s.v1.cni.cncf.io/resourceName": n.resource}},
			Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: cfg},
		})
		rcts = append(rcts, rct)
	}
	for _, s := range nets {
		n := c.network(refOf("SriovNetwork", s.ObjectMeta), s.ObjectMeta, s.Spec.NetworkNamespace, s.Spec.ResourceName)
		n.capabilities, n.ipam, n.metaPlugins, n.linkState = s.Spec.Capabilities, s.Spec.IPAM, s.Spec.MetaPluginsConfig, s.Spec.LinkState
		sp := s.Spec
		p := sriovCNI{Type: "sriov", Vlan: new(sp.Vlan)}
		if sp.VlanQoS >= 0 && sp.VlanQoS <= 7 {
			p.VlanQoS = new(sp.VlanQoS)
		}
		p.VlanProto = enum(c.r, n.at, "spec.vlanProto", sp.VlanProto, "802.1q", "802.1ad")
		p.SpoofChk = enum(c.r, n.at, "spec.spoofChk", sp.SpoofChk, "on", "off")
		p.Trust = enum(c.r, n.at, "spec.trust", sp.Trust, "on", "off")
		if sp.MinTxRate != nil && *sp.MinTxRate >= 0 {
			p.MinTxRate = sp.MinTxRate
		}
		if sp.MaxTxRate != nil && *sp.MaxTxRate >= 0 {
			p.MaxTxRate = sp.MaxTxRate
		}
		p.LogLevel = enum(c.r, n.at, "spec.logLevel", sp.LogLevel, "panic", "error", "warning", "info", "debug")
		p.LogFile = sp.LogFile
		if sp.LogFile != "" {
			c.r.add(n.at, "spec.logFile", fmt.Sprintf("%q is a file of the node: fastpathd runs the network only where --npwg-host-paths allows its directory", sp.LogFile))
		}
		vf := &v1alpha1.VFConfig{VLANProto: p.VlanProto, LinkState: enum(nil, n.at, "", sp.LinkState, "auto", "enable", "disable"),
			MinTxRateMbps: p.MinTxRate, MaxTxRateMbps: p.MaxTxRate}
		if sp.Vlan != 0 {
			vf.VLAN = new(sp.Vlan)
		}
		if p.VlanQoS != nil && *p.VlanQoS != 0 {
			vf.QoS = p.VlanQoS
		}
		if p.SpoofChk != "" {
			vf.SpoofChk = new(p.SpoofChk == "on")
		}
		if p.Trust != "" {
			vf.Trust = new(p.Trust == "on")
		}
		if *vf == (v1alpha1.VFConfig{}) {
			vf = nil
		}
		add(n, p, vf)
	}
	for _, s := range ibs {
		n := c.network(refOf("SriovIBNetwork", s.ObjectMeta), s.ObjectMeta, s.Spec.NetworkNamespace, s.Spec.ResourceName)
		n.capabilities, n.ipam, n.metaPlugins, n.linkState = s.Spec.Capabilities, s.Spec.IPAM, s.Spec.MetaPluginsConfig, s.Spec.LinkState
		add(n, sriovCNI{Type: "ib-sriov"}, nil)
	}
	return nads, rcts
}

func (c *converter) network(at ref, meta metav1.ObjectMeta, networkNamespace, resourceName string) network {
	ns := networkNamespace
	if ns == "" {
		ns = meta.Namespace
	}
	return network{at: at, meta: meta, namespace: ns, resource: c.opts.ResourcePrefix + "/" + resourceName}
}

// cniConfig is the network's spec.config: the plugin alone, or with the
// meta plugins a conflist.
func (c *converter) cniConfig(n network, p sriovCNI) (string, error) {
	var metas []json.RawMessage
	if strings.TrimSpace(n.metaPlugins) != "" {
		// The operator writes the string into the plugins list as it is:
		// one or more objects, separated by commas.
		if err := json.Unmarshal([]byte("["+n.metaPlugins+"]"), &metas); err != nil {
			c.r.add(n.at, "spec.metaPlugins", fmt.Sprintf("not JSON objects separated by commas: %v: left out", err))
			metas = nil
		}
	}
	if len(metas) == 0 {
		p.CNIVersion, p.Name = "1.0.0", n.meta.Name
		data, err := json.MarshalIndent(p, "", "  ")
		return string(data), err
	}
	plugin, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	data, err := json.MarshalIndent(struct {
		CNIVersion string            `json:"cniVersion"`
		Name       string            `json:"name"`
		Plugins    []json.RawMessage `json:"plugins"`
	}{"1.0.0", n.meta.Name, append([]json.RawMessage{plugin}, metas...)}, "", "  ")
	return string(data), err
}

// jsonObject is a field holding a JSON object as a string, parsed; nil
// when it is empty or not an object (reported).
func (c *converter) jsonObject(at ref, field, s string) json.RawMessage {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		c.r.add(at, field, fmt.Sprintf("not a JSON object: %v: left out", err))
		return nil
	}
	data, _ := json.Marshal(m) // what unmarshalled marshals
	return data
}

// enum is v in lowercase when it is one of allowed in any letter case (as
// the operator's CRD takes them); another value is reported (r non-nil)
// and left out.
func enum(r *report, at ref, field, v string, allowed ...string) string {
	if v == "" {
		return ""
	}
	for _, a := range allowed {
		if strings.EqualFold(v, a) {
			return a
		}
	}
	if r != nil {
		r.add(at, field, fmt.Sprintf("%q: must be one of %s: left out", v, strings.Join(allowed, ", ")))
	}
	return ""
}

// pools reports the SriovNetworkPoolConfigs: fastpath has no pools.
func (c *converter) pools(pools []*poolConfig) {
	for _, p := range pools {
		at := refOf("SriovNetworkPoolConfig", p.ObjectMeta)
		if p.Spec.MaxUnavailable != nil {
			c.r.add(at, "spec.maxUnavailable", fmt.Sprintf("%s: no equivalent: nothing to drain, as fastpath never changes a PF's VFs while one of them is prepared for a claim (the FastpathNodeConfig's status says VFsInUse until they are released)", p.Spec.MaxUnavailable.String()))
		}
		if mode := enum(c.r, at, "spec.rdmaMode", p.Spec.RdmaMode, "shared", "exclusive"); mode != "" {
			param := map[string]string{"shared": "1", "exclusive": "0"}[mode]
			c.r.add(at, "spec.rdmaMode", fmt.Sprintf("%s: fastpathd has no flag for it: the RDMA subsystem's network namespace mode is the node's, read at Prepare (attribute rdmaNetnsMode); set it at boot on the nodes of the pool: options ib_core netns_mode=%s in /etc/modprobe.d/", mode, param))
		}
		if len(p.Spec.OvsHardwareOffloadConfig) > 0 {
			c.r.add(at, "spec.ovsHardwareOffloadConfig", "no equivalent: fastpath does not configure OVS hardware offload")
		}
	}
}

// pluginTypes are the plugin and IPAM types a configuration runs.
func pluginTypes(cfg string) []string {
	type plugin struct {
		Type string `json:"type"`
		IPAM struct {
			Type string `json:"type"`
		} `json:"ipam"`
	}
	var conf struct {
		plugin
		Plugins []plugin `json:"plugins"`
	}
	_ = json.Unmarshal([]byte(cfg), &conf) // made by cniConfig
	var types []string
	for _, p := range append([]plugin{conf.plugin}, conf.Plugins...) {
		for _, t := range []string{p.Type, p.IPAM.Type} {
			if t != "" && !slices.Contains(types, t) {
				types = append(types, t)
			}
		}
	}
	return types
}
