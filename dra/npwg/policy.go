package npwg

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
)

// ErrNotAllowed is the error of a pod selecting a network the operator
// does not let it use (§7.4: the pod's network operation fails).
var ErrNotAllowed = errors.New("network not allowed")

// AllNamespaces in Policy.AllowedNamespaces lets pods use the networks of
// every namespace.
const AllNamespaces = "*"

// Policy is the operator's rule for which NetworkAttachmentDefinitions a
// pod may select (§7.4). A pod may always use those of its own namespace,
// which is where an element that names no namespace looks (§4.1.1,
// §4.1.2.1.1); those of another namespace only when that namespace is
// allowed. No namespace is special: the one called "default" is allowed
// only when it is listed.
//
// The policy also says which objects of the host a NetworkAttachmentDefinition's
// spec.config may name (HostObjects): whoever may write one in a namespace
// is not trusted with the node. A configuration from the operator's
// directory (a NetworkAttachmentDefinition with an empty spec.config) may
// name any.
type Policy struct {
	// AllowedNamespaces are the namespaces whose networks pods of every
	// namespace may use; AllNamespaces allows all.
	AllowedNamespaces []string
	// HostDevices are the host devices (interface names, PCI addresses,
	// MACs: what a field such as master, bridge, device or pciBusID holds)
	// a spec.config may name, as shell patterns ("ens1f*"; "*": all).
	HostDevices []string
	// HostPaths are the directories of the host under which a
	// spec.config may name files (host-local's dataDir, any absolute
	// path); "/" allows all.
	HostPaths []string
	// HostOptions are the host-changing options a spec.config may turn on
	// (bridge's isGateway or ipMasq, tuning's sysctls outside net.*), as
	// patterns of "<plugin type>.<option>"; "*" allows all. A mode that
	// takes the master whole is an option named as the mode
	// ("macvlan.passthru").
	HostOptions []string
	// VLANIDs are the VLANs of its master a spec.config may make its
	// interface on (vlan's vlanId, 0 when left out), as IDs ("100") and
	// ranges ("100-199"); none by default.
	VLANIDs []string
}

// Validate says why the policy is not one an operator can mean, or nil.
func (p Policy) Validate() error {
	var errs []error
	for _, ns := range p.AllowedNamespaces {
		if ns == AllNamespaces {
			continue
		}
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("allowed namespace %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	if err := p.hostPolicy().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ErrHostObject is the error of a NetworkAttachmentDefinition whose
// spec.config names an object of the host the operator does not allow.
var ErrHostObject = errors.New("names an object of the host")

// hostPolicy is the policy's part for objects of the host.
func (p Policy) hostPolicy() cnipolicy.Policy {
	return cnipolicy.Policy{Devices: p.HostDevices, Paths: p.HostPaths, Options: p.HostOptions, VLANIDs: p.VLANIDs}
}

// HostObjects says why the configuration takes or changes an object of
// the host the policy does not allow (wrapping ErrHostObject), or nil.
// Each plugin's configuration is read as the plugin reads it
// (cnipolicy.Inspect: keys in any letter case, defaults that are host
// objects, host-changing options, VLANs of the master). delegated says
// the network is given a device of the pod's claims, which fills a master
// left out: that master is the pod's own device, so what takes it whole
// or makes VLANs of it is the pod's too. Only a configuration of
// spec.config is checked.
func (p Policy) HostObjects(cfg *Config, delegated bool) error {
	if cfg.Source != SourceSpec {
		return nil
	}
	pol := p.hostPolicy()
	// At most bounds.Problems faults are said, each cut; the rest
	// counted.
	var faults []string
	more := 0
	for i, pc := range cfg.List.Plugins {
		var conf map[string]any
		if err := json.Unmarshal(pc.Bytes, &conf); err != nil {
			return fmt.Errorf("plugins[%d]: %w", i, err)
		}
		view := cnipolicy.Inspect(conf)
		if delegated && cnipolicy.MakesOnMaster(pc.Network.Type) && slices.ContainsFunc(view.Refs, isMasterLeftOut) {
			view.Refs = slices.DeleteFunc(view.Refs, func(r cnipolicy.Ref) bool { return isMasterLeftOut(r) || r.OfMaster })
		}
		for _, f := range pol.Faults(view) {
			if len(faults) == bounds.Problems {
				more++
				continue
			}
			faults = append(faults, bounds.Cut(fmt.Sprintf("plugins[%d] (%s): %s", i, pc.Network.Type, f), bounds.ProblemBytes))
		}
	}
	if len(faults) == 0 {
		return nil
	}
	if more > 0 {
		faults = append(faults, fmt.Sprintf("and %d more", more))
	}
	return fmt.Errorf("%w: %s", ErrHostObject, strings.Join(faults, "; "))
}

// isMasterLeftOut says whether r is a master left out.
func isMasterLeftOut(r cnipolicy.Ref) bool {
	return r.Kind == cnipolicy.HostDevice && r.Omitted && r.Field == "master"
}

// InvocationHostObjects says why the plugins of the attachment's
// invocation, as libcni runs them, take or change an object of the host
// the policy does not allow (wrapping ErrHostObject), or nil. Each
// plugin's configuration is read as the plugin reads it
// (Invocation.PluginConfs): the element's cni-args merged into args.cni,
// its capability values (ips, mac, portMappings...) in runtimeConfig, so
// that a sysctl of the node in cni-args counts as one in the
// configuration. What the node gave (GiveDevice) is not judged. Of a
// configuration the operator gave (trusted: from the configuration
// directory or the CRI Network API), only what the element added is.
func (p Policy) InvocationHostObjects(inv *Invocation, trusted bool) error {
	if trusted && len(inv.fromPod) == 0 {
		return nil
	}
	confs, err := inv.PluginConfs()
	if err != nil {
		return err
	}
	var bases []map[string]any
	if trusted {
		if bases, err = (&Invocation{List: inv.base}).PluginConfs(); err != nil {
			return err
		}
	}
	pol := p.hostPolicy()
	var faults []string
	for i, conf := range confs {
		typ := inv.List.Plugins[i].Network.Type
		view := cnipolicy.Inspect(conf)
		view.Refs = slices.DeleteFunc(view.Refs, func(r cnipolicy.Ref) bool {
			return slices.Contains(inv.given, r.Path) || trusted && !slices.ContainsFunc(inv.fromPod, func(at string) bool { return under(r.Path, at) })
		})
		if trusted && i < len(bases) {
			own := cnipolicy.Inspect(bases[i]).Problems
			view.Problems = slices.DeleteFunc(view.Problems, func(pr string) bool { return slices.Contains(own, pr) })
		}
		for _, f := range pol.Faults(view) {
			faults = append(faults, fmt.Sprintf("plugins[%d] (%s): %s%s", i, typ, f, inv.origin(f)))
		}
	}
	if len(faults) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrHostObject, strings.Join(faults, "; "))
}

// origin says which key of the pod's element put what a fault names
// there, "" for none.
func (inv *Invocation) origin(fault string) string {
	at, _, _ := strings.Cut(fault, " ")
	for _, from := range inv.fromPod {
		if !under(at, from) {
			continue
		}
		if key, ok := strings.CutPrefix(from, "args.cni."); ok {
			return fmt.Sprintf(" (the element's cni-args %q, which each plugin reads as args.cni.%s)", key, key)
		}
		capability := strings.TrimPrefix(from, runtimeConfigKey+".")
		return fmt.Sprintf(" (the element's %q, which libcni gives the plugin as %s)", elementKeyOf(capability), from)
	}
	return ""
}

// elementKeyOf is the selection key whose value goes to the plugins as
// the capability.
func elementKeyOf(capability string) string {
	if capability == CapabilityInfinibandGUID {
		return "infiniband-guid"
	}
	return capability
}

// under says whether the dotted path is at or below at.
func under(path, at string) bool {
	return path == at || strings.HasPrefix(path, at+".") || strings.HasPrefix(path, at+"[")
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// Check says why a pod of podNamespace may not use the attachment's
// network, wrapping ErrNotAllowed, or nil.
func (p Policy) Check(podNamespace string, att *Attachment) error {
	ns := att.Namespace
	if ns == "" || ns == podNamespace || slices.Contains(p.AllowedNamespaces, AllNamespaces) || slices.Contains(p.AllowedNamespaces, ns) {
		return nil
	}
	return fmt.Errorf("%w: network %s: a pod of namespace %s may use the networks of its own namespace and of those the operator allows (%s)",
		ErrNotAllowed, att.Network(), podNamespace, listOrNone(p.AllowedNamespaces))
}
