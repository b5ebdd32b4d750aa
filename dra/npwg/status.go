package npwg

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	cnitypes "github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
)

// AttachmentStatus is the network-status entry of an attachment, from the
// result of its CNI ADD or GET (§5.1.1, §5.3). Its name is the network's
// namespace/name; interface, mac and mtu are those of the result's first
// interface with a sandbox; its ips are the addresses of that interface,
// or, when no interface has a sandbox, those of no interface (all of them,
// so that a dual-stack attachment shows both families); dns is the
// result's. Addresses are written without their prefix length, as the
// standard's Go library writes them. dev, when not nil, is the
// device-info. When the element had "default-route", gateways are the
// ones it asked for, or the result's default routes' when it asked for
// none. A nil result (CNI allows one) gives the minimal entry: the name
// and the interface name the attachment was made with.
func AttachmentStatus(att *Attachment, result cnitypes.Result, dev *nadv1.DeviceInfo) (nadv1.NetworkStatus, error) {
	st := nadv1.NetworkStatus{Name: att.Network(), Interface: att.InterfaceRequest, DeviceInfo: dev}
	for _, gw := range att.GatewayRequest {
		st.Gateway = append(st.Gateway, gw.String())
	}
	if result == nil {
		return st, nil
	}
	res, err := types100.NewResultFromResult(result)
	if err != nil {
		return st, fmt.Errorf("network %s: read the CNI result: %w", att.Network(), err)
	}
	sandbox := slices.IndexFunc(res.Interfaces, func(i *types100.Interface) bool { return i != nil && i.Sandbox != "" })
	if sandbox >= 0 {
		iface := res.Interfaces[sandbox]
		if iface.Name != "" {
			st.Interface = iface.Name
		}
		st.Mac, st.Mtu = iface.Mac, iface.Mtu
	}
	for _, ipc := range res.IPs {
		if ipc == nil || ipc.Address.IP == nil {
			continue
		}
		noInterface := ipc.Interface == nil || *ipc.Interface < 0
		if sandbox >= 0 && !noInterface && *ipc.Interface == sandbox || sandbox < 0 && noInterface {
			st.IPs = append(st.IPs, ipc.Address.IP.String())
		}
	}
	st.DNS = nadv1.DNS{
		Nameservers: slices.Clone(res.DNS.Nameservers),
		Domain:      res.DNS.Domain,
		Search:      slices.Clone(res.DNS.Search),
		Options:     slices.Clone(res.DNS.Options),
	}
	if att.DefaultRoute() && len(att.GatewayRequest) == 0 {
		for _, r := range res.Routes {
			if r == nil || r.GW == nil {
				continue
			}
			if ones, bits := r.Dst.Mask.Size(); bits > 0 && ones == 0 {
				st.Gateway = append(st.Gateway, r.GW.String())
			}
		}
	}
	return st, nil
}

// DefaultNetworkStatus is the entry of the cluster default network (§5.2):
// its name (with a namespace, as §5.3.1 recommends), the pod's interface
// on it, and the pod's primary IPs.
func DefaultNetworkStatus(name, ifName string, podIPs []corev1.PodIP) nadv1.NetworkStatus {
	st := nadv1.NetworkStatus{Name: name, Interface: ifName, Default: true}
	for _, ip := range podIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			st.IPs = append(st.IPs, a.String())
		}
	}
	return st
}

// statusJSON is an entry as the annotation has it: the standard's Go type,
// which writes gateways as "gateway" (as the standard's Go library and
// Multus do), and beside them the key the standard's text names,
// "default-route" (§5.3.7.4), for readers of either; and "default" on
// every entry, false too, as §5.3.6 makes it required (the Go type leaves
// it out when false).
type statusJSON struct {
	nadv1.NetworkStatus
	DefaultRoute []string `json:"default-route,omitempty"`
	Default      bool     `json:"default"`
}

func encodeEntry(st nadv1.NetworkStatus) (json.RawMessage, error) {
	return json.Marshal(statusJSON{NetworkStatus: st, DefaultRoute: st.Gateway, Default: st.Default})
}

// checkStatus checks the entries' own rules (§5.3): a name; a mac only
// with an interface; one default entry at most; one entry per name and
// interface.
func checkStatus(entries []nadv1.NetworkStatus) error {
	var errs []error
	defaults := 0
	seen := map[[2]string]bool{}
	for i, st := range entries {
		switch {
		case st.Name == "":
			errs = append(errs, fmt.Errorf("entry %d: no name", i))
		case st.Mac != "" && st.Interface == "":
			errs = append(errs, fmt.Errorf("entry %d (%s): a mac without an interface", i, st.Name))
		case seen[[2]string{st.Name, st.Interface}]:
			errs = append(errs, fmt.Errorf("entry %d: network %s, interface %q, twice", i, st.Name, st.Interface))
		}
		seen[[2]string{st.Name, st.Interface}] = true
		if st.Default {
			defaults++
		}
	}
	if defaults > 1 {
		errs = append(errs, fmt.Errorf("%d entries are the default network's; one may be", defaults))
	}
	return errors.Join(errs...)
}

// EncodeNetworkStatus is the value of the k8s.v1.cni.cncf.io/network-status
// annotation with the entries (§5).
func EncodeNetworkStatus(entries []nadv1.NetworkStatus) (string, error) {
	if err := checkStatus(entries); err != nil {
		return "", fmt.Errorf("network status: %w", err)
	}
	raws := make([]json.RawMessage, 0, len(entries))
	for _, st := range entries {
		raw, err := encodeEntry(st)
		if err != nil {
			return "", err
		}
		raws = append(raws, raw)
	}
	return marshalStatus(raws)
}

func marshalStatus(raws []json.RawMessage) (string, error) {
	data, err := json.MarshalIndent(raws, "", "  ")
	if err != nil {
		return "", err
	}
	return string(data), nil
}

// DecodeNetworkStatus reads a k8s.v1.cni.cncf.io/network-status
// annotation. Keys it does not know (other implementations') are passed
// over; an entry with "default-route" but no "gateway" has its gateways
// from the former. An empty value has no entries.
func DecodeNetworkStatus(value string) ([]nadv1.NetworkStatus, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, nil
	}
	if value[0] != '[' {
		return nil, fmt.Errorf("network status: must be a JSON list of objects, not %s", kindOf([]byte(value)))
	}
	var raws []statusJSON
	if err := json.Unmarshal([]byte(value), &raws); err != nil {
		return nil, fmt.Errorf("network status: %s", jsonError(err))
	}
	entries := make([]nadv1.NetworkStatus, 0, len(raws))
	for _, r := range raws {
		if len(r.Gateway) == 0 {
			r.Gateway = r.DefaultRoute
		}
		r.NetworkStatus.Default = r.Default
		entries = append(entries, r.NetworkStatus)
	}
	return entries, nil
}

// MergeNetworkStatus puts ours into the annotation's current value: an
// entry of the same network and interface is replaced where it stands, the
// others are added at the end, and the entries of other writers are kept
// as they are, keys unknown to this package included. When ours has the
// default network's entry, it is the only default one. A current value
// that is not a JSON list is an error; pass "" to overwrite it.
func MergeNetworkStatus(current string, ours []nadv1.NetworkStatus) (string, error) {
	if err := checkStatus(ours); err != nil {
		return "", fmt.Errorf("network status: %w", err)
	}
	var existing []json.RawMessage
	if t := strings.TrimSpace(current); t != "" {
		if t[0] != '[' {
			return "", fmt.Errorf("the pod's network status: must be a JSON list of objects, not %s", kindOf([]byte(t)))
		}
		if err := json.Unmarshal([]byte(t), &existing); err != nil {
			return "", fmt.Errorf("the pod's network status: %s", jsonError(err))
		}
	}
	type key struct{ name, iface string }
	index := map[key]int{}
	encoded := make([]json.RawMessage, len(ours))
	oursDefault := false
	for i, st := range ours {
		raw, err := encodeEntry(st)
		if err != nil {
			return "", err
		}
		encoded[i], index[key{st.Name, st.Interface}] = raw, i
		oursDefault = oursDefault || st.Default
	}
	placed := make([]bool, len(ours))
	out := []json.RawMessage{}
	for _, raw := range existing {
		var head struct {
			Name      string `json:"name"`
			Interface string `json:"interface"`
			Default   bool   `json:"default"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			out = append(out, raw) // not ours to judge
			continue
		}
		if i, ok := index[key{head.Name, head.Interface}]; ok {
			if !placed[i] {
				out, placed[i] = append(out, encoded[i]), true
			}
			continue
		}
		if head.Default && oursDefault {
			continue
		}
		out = append(out, raw)
	}
	for i, raw := range encoded {
		if !placed[i] {
			out = append(out, raw)
		}
	}
	return marshalStatus(out)
}
