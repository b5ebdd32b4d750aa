package npwg

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"

	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
)

// The capabilities, in CNI's conventions, that the selection keys need a
// plugin of the network to declare (§4.1.2.1).
const (
	CapabilityIPs            = "ips"
	CapabilityMAC            = "mac"
	CapabilityInfinibandGUID = "infinibandGUID"
	CapabilityPortMappings   = "portMappings"
	CapabilityBandwidth      = "bandwidth"
	CapabilityIPRanges       = "ipRanges"
)

// IPRangeSets are subnets as CNI's ipRanges runtimeConfig, and host-local's
// "ranges", hold them: one range set per address family (host-local gives
// an address from each set), the subnets of a family as its ranges, in
// order. A subnet that does not parse is in its own set.
func IPRangeSets(cidrs []string) [][]map[string]any {
	var v4, v6 []map[string]any
	var out [][]map[string]any
	for _, c := range cidrs {
		r := map[string]any{"subnet": c}
		p, err := netip.ParsePrefix(c)
		switch {
		case err != nil:
			out = append(out, []map[string]any{r})
		case p.Addr().Is4():
			v4 = append(v4, r)
		default:
			v6 = append(v6, r)
		}
	}
	for _, set := range [][]map[string]any{v4, v6} {
		if len(set) > 0 {
			out = append(out, set)
		}
	}
	return out
}

// ErrCapability is the error of an attachment asking for what no plugin
// of its network declares the capability for: the attachment fails.
var ErrCapability = errors.New("no plugin of the network has the capability")

// defaultBurst is the burst, in bits, of a bandwidth limit given without
// one: no limit on bursts, as the kubelet chose for its own bandwidth
// annotations. CNI's bandwidth plugin refuses a rate without a burst.
const defaultBurst = math.MaxInt32

// Invocation is what libcni needs, besides the container, to run one
// attachment.
type Invocation struct {
	// Network is the attachment's network, namespace/name.
	Network string
	// List is the network's configuration with the attachment's cni-args
	// in each plugin's args.cni and no runtimeConfig of its own.
	List *libcni.NetworkConfigList
	// IfName is CNI_IFNAME.
	IfName string
	// CapabilityArgs are the runtimeConfig values for libcni, which gives
	// each plugin those of the capabilities it declares.
	CapabilityArgs map[string]any

	// fromPod are the paths, in each plugin's configuration as libcni
	// gives it (PluginConfs), of what the pod's element put there: its
	// cni-args in args.cni, its capability values in runtimeConfig.
	fromPod []string
	// given are the paths of the fields the node set (GiveDevice).
	given []string
	// base is the network's configuration before the pod's element went
	// in.
	base *libcni.NetworkConfigList
}

// RuntimeConf is the libcni runtime configuration of the invocation for a
// container.
func (inv *Invocation) RuntimeConf(containerID, netns string, args [][2]string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID:    containerID,
		NetNS:          netns,
		IfName:         inv.IfName,
		Args:           args,
		CapabilityArgs: inv.CapabilityArgs,
	}
}

// BuildInvocation builds an attachment's invocation of its network's
// configuration list. "ips", "mac", "infiniband-guid", "portMappings"
// and "bandwidth" become runtimeConfig values, each only when a plugin of
// the list declares its capability; when none does, the attachment fails
// (§4.1.2.1.3.2, .4.2, .7.2, .8.2, .10.2) with an error wrapping
// ErrCapability that names them all. "cni-args" are merged into each
// plugin's args.cni over the configuration's own (§4.1.2.1.6.2). A
// runtimeConfig written into the configuration is dropped, so that only
// what the attachment asks for reaches the plugins (§7.5). The attachment
// needs its interface name (AssignInterfaces); list is not modified.
// "default-route" and "ipam-claim-reference" are not runtimeConfig values:
// the first is the runtime's to apply to the result, the second the
// delegate's to read from the pod.
func BuildInvocation(att *Attachment, list *libcni.NetworkConfigList) (*Invocation, error) {
	if att.InterfaceRequest == "" {
		return nil, fmt.Errorf("network %s: the attachment has no interface name yet", att.Network())
	}
	if list == nil || len(list.Plugins) == 0 {
		return nil, fmt.Errorf("network %s: a CNI configuration without plugins", att.Network())
	}
	declared := map[string]bool{}
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Network.Type)
		for c, ok := range p.Network.Capabilities {
			declared[c] = declared[c] || ok
		}
	}
	args := map[string]any{}
	var missing []string
	want := func(key, capability string, value any) {
		if declared[capability] {
			args[capability] = value
			return
		}
		missing = append(missing, fmt.Sprintf("%q (capability %q)", key, capability))
	}
	if len(att.IPRequest) > 0 {
		want("ips", CapabilityIPs, slices.Clone(att.IPRequest))
	}
	if att.MacRequest != "" {
		want("mac", CapabilityMAC, att.MacRequest)
	}
	if att.InfinibandGUIDRequest != "" {
		want("infiniband-guid", CapabilityInfinibandGUID, att.InfinibandGUIDRequest)
	}
	if len(att.PortMappingsRequest) > 0 {
		want("portMappings", CapabilityPortMappings, portMappings(att.PortMappingsRequest))
	}
	if att.BandwidthRequest != nil {
		want("bandwidth", CapabilityBandwidth, bandwidth(*att.BandwidthRequest))
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: network %s: the pod asks for %s, but none of the network's plugins (%s) declares the capability",
			ErrCapability, att.Network(), strings.Join(missing, ", "), strings.Join(types, ", "))
	}
	var cniArgs map[string]any
	if att.CNIArgs != nil {
		cniArgs = *att.CNIArgs
	}
	inv := &Invocation{Network: att.Network(), List: list, IfName: att.InterfaceRequest, CapabilityArgs: args, base: list}
	for _, k := range slices.Sorted(maps.Keys(cniArgs)) {
		inv.fromPod = append(inv.fromPod, "args.cni."+k)
	}
	for _, c := range slices.Sorted(maps.Keys(args)) {
		inv.fromPod = append(inv.fromPod, runtimeConfigKey+"."+c)
	}
	if cniArgs == nil && !mentionsFold(list, runtimeConfigKey) {
		// Nothing to change: the list as it is.
		return inv, nil
	}
	rebuilt, err := rebuildList(list, cniArgs, nil)
	if err != nil {
		return nil, fmt.Errorf("network %s: %w", att.Network(), err)
	}
	inv.List = rebuilt
	return inv, nil
}

// runtimeConfigKey is the key libcni puts each plugin's capability values
// under.
const runtimeConfigKey = "runtimeConfig"

// PluginConfs are the configurations of the invocation's plugins as
// libcni hands them over: each plugin's of List, with the values of
// CapabilityArgs of the capabilities it declares as its runtimeConfig
// (libcni's injectRuntimeConfig). Numbers keep their digits.
func (inv *Invocation) PluginConfs() ([]map[string]any, error) {
	out := make([]map[string]any, 0, len(inv.List.Plugins))
	for i, p := range inv.List.Plugins {
		conf, err := decodeObject(p.Bytes)
		if err != nil {
			return nil, fmt.Errorf("plugins[%d]: %w", i, err)
		}
		rc := map[string]any{}
		for c, declared := range p.Network.Capabilities {
			if v, ok := inv.CapabilityArgs[c]; ok && declared {
				rc[c] = v
			}
		}
		if len(rc) > 0 {
			// As JSON, as the plugin reads it.
			data, err := json.Marshal(rc)
			if err != nil {
				return nil, fmt.Errorf("plugins[%d]: %w", i, err)
			}
			if conf[runtimeConfigKey], err = decodeObject(data); err != nil {
				return nil, fmt.Errorf("plugins[%d]: %w", i, err)
			}
		}
		out = append(out, conf)
	}
	return out, nil
}

// portMappings are the entries in the shape of CNI's conventions: the
// protocol in lower case, tcp when not given.
func portMappings(entries []*nadv1.PortMapEntry) []nadv1.PortMapEntry {
	out := make([]nadv1.PortMapEntry, 0, len(entries))
	for _, e := range entries {
		if e == nil {
			continue
		}
		pm := *e
		pm.Protocol = strings.ToLower(pm.Protocol)
		if pm.Protocol == "" {
			pm.Protocol = "tcp"
		}
		out = append(out, pm)
	}
	return out
}

// bandwidth is the limit with a burst for each rate given without one.
func bandwidth(bw nadv1.BandwidthEntry) nadv1.BandwidthEntry {
	if bw.IngressRate > 0 && bw.IngressBurst == 0 {
		bw.IngressBurst = defaultBurst
	}
	if bw.EgressRate > 0 && bw.EgressBurst == 0 {
		bw.EgressBurst = defaultBurst
	}
	return bw
}

// mentionsFold says whether a key that folds to word may be anywhere in
// the list's configuration (cnipolicy.MentionsFold): where none can be,
// there is nothing to remove.
func mentionsFold(list *libcni.NetworkConfigList, word string) bool {
	if cnipolicy.MentionsFold(list.Bytes, word) {
		return true
	}
	for _, p := range list.Plugins {
		if cnipolicy.MentionsFold(p.Bytes, word) {
			return true
		}
	}
	return false
}

// rebuildList copies list with every runtimeConfig removed (in any
// letter case: plugins read "RuntimeConfig" as runtimeConfig), cniArgs
// merged into each plugin's args.cni and each plugin's configuration
// changed by set, when not nil, given each plugin's
// type.
func rebuildList(list *libcni.NetworkConfigList, cniArgs map[string]any, set func(conf map[string]any, typ string) error) (*libcni.NetworkConfigList, error) {
	plugins := make([]*libcni.PluginConfig, 0, len(list.Plugins))
	raws := make([]json.RawMessage, 0, len(list.Plugins))
	for i, p := range list.Plugins {
		conf, err := decodeObject(p.Bytes)
		if err != nil {
			return nil, fmt.Errorf("plugins[%d]: %w", i, err)
		}
		cnipolicy.Delete(conf, runtimeConfigKey)
		if set != nil {
			if err := set(conf, p.Network.Type); err != nil {
				return nil, fmt.Errorf("plugins[%d]: %w", i, err)
			}
		}
		if cniArgs != nil {
			if err := mergeCNIArgs(conf, cniArgs); err != nil {
				return nil, fmt.Errorf("plugins[%d] (%s): %w", i, p.Network.Type, err)
			}
		}
		data, err := json.Marshal(conf)
		if err != nil {
			return nil, fmt.Errorf("plugins[%d]: %w", i, err)
		}
		pc, err := libcni.NetworkPluginConfFromBytes(data)
		if err != nil {
			return nil, fmt.Errorf("plugins[%d]: %w", i, err)
		}
		plugins = append(plugins, pc)
		raws = append(raws, data)
	}
	top := map[string]any{}
	if len(list.Bytes) > 0 {
		var err error
		if top, err = decodeObject(list.Bytes); err != nil {
			return nil, err
		}
	}
	cnipolicy.Delete(top, runtimeConfigKey)
	top["name"], top["cniVersion"], top["plugins"] = list.Name, list.CNIVersion, raws
	data, err := json.Marshal(top)
	if err != nil {
		return nil, err
	}
	out := *list
	out.Plugins, out.Bytes = plugins, data
	return &out, nil
}

// mergeCNIArgs puts the pod's cni-args into a plugin's args.cni; they win
// over the configuration's own.
func mergeCNIArgs(conf map[string]any, cniArgs map[string]any) error {
	args := map[string]any{}
	if key, v, ok := cnipolicy.Get(conf, "args"); ok {
		m, isObject := v.(map[string]any)
		if !isObject {
			return fmt.Errorf("the configuration's %s must be an object to take the pod's cni-args, not %s", key, describe(v))
		}
		args = m
	}
	cni := map[string]any{}
	if key, v, ok := cnipolicy.Get(args, "cni"); ok {
		m, isObject := v.(map[string]any)
		if !isObject {
			return fmt.Errorf("the configuration's args.%s must be an object to take the pod's cni-args, not %s", key, describe(v))
		}
		cni = m
	}
	maps.Copy(cni, cniArgs)
	cnipolicy.Set(args, "cni", cni)
	cnipolicy.Set(conf, "args", args)
	return nil
}
