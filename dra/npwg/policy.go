package npwg

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
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
	for _, pat := range p.HostDevices {
		if _, err := path.Match(pat, ""); err != nil || pat == "" {
			errs = append(errs, fmt.Errorf("host device %q: not a shell pattern", pat))
		}
	}
	for _, dir := range p.HostPaths {
		if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
			errs = append(errs, fmt.Errorf("host path %q: not a clean absolute path", dir))
		}
	}
	return errors.Join(errs...)
}

// ErrHostObject is the error of a NetworkAttachmentDefinition whose
// spec.config names an object of the host the operator does not allow.
var ErrHostObject = errors.New("names an object of the host")

// HostObjects says why the configuration names an object of the host the
// policy does not allow (wrapping ErrHostObject), or nil. A field that
// names a host device (v1alpha1.HostDeviceField) must hold one of
// HostDevices; one that names a file (v1alpha1.HostPathField), and any
// string that is an absolute path, a path under HostPaths. Only a
// configuration of spec.config is checked.
func (p Policy) HostObjects(cfg *Config) error {
	if cfg.Source != SourceSpec {
		return nil
	}
	var faults []string
	for i, pc := range cfg.List.Plugins {
		var conf map[string]any
		if err := json.Unmarshal(pc.Bytes, &conf); err != nil {
			return fmt.Errorf("plugins[%d]: %w", i, err)
		}
		for _, f := range p.hostObjectsIn(conf, "") {
			faults = append(faults, fmt.Sprintf("plugins[%d] (%s): %s", i, pc.Network.Type, f))
		}
	}
	if len(faults) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrHostObject, strings.Join(faults, "; "))
}

// hostObjectsIn is what v, at the dotted path at of a plugin's config,
// names of the host that the policy does not allow.
func (p Policy) hostObjectsIn(v any, at string) []string {
	var faults []string
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			sub := k
			if at != "" {
				sub = at + "." + k
			}
			s, isString := v[k].(string)
			switch {
			case isString && v1alpha1.HostDeviceField(k):
				if !p.hostDevice(s) {
					faults = append(faults, fmt.Sprintf("%s %q is not one of the host devices the operator allows (%s)", sub, s, listOrNone(p.HostDevices)))
				}
			case isString && v1alpha1.HostPathField(k) && s != "":
				if !p.hostPath(s) {
					faults = append(faults, fmt.Sprintf("%s %q is not under a host directory the operator allows (%s)", sub, s, listOrNone(p.HostPaths)))
				}
			default:
				faults = append(faults, p.hostObjectsIn(v[k], sub)...)
			}
		}
	case []any:
		for i, e := range v {
			faults = append(faults, p.hostObjectsIn(e, fmt.Sprintf("%s[%d]", at, i))...)
		}
	case string:
		if strings.HasPrefix(v, "/") && !p.hostPath(v) {
			faults = append(faults, fmt.Sprintf("%s %q is not under a host directory the operator allows (%s)", at, v, listOrNone(p.HostPaths)))
		}
	}
	return faults
}

// hostDevice says whether the policy lets a spec.config name the host
// device dev.
func (p Policy) hostDevice(dev string) bool {
	return slices.ContainsFunc(p.HostDevices, func(pat string) bool {
		ok, _ := path.Match(pat, dev)
		return ok
	})
}

// hostPath says whether the policy lets a spec.config name the file at
// name: an absolute path under one of HostPaths once cleaned (a relative
// one is the plugin's working directory's, the runtime's: refused too).
func (p Policy) hostPath(name string) bool {
	if !filepath.IsAbs(name) {
		return false
	}
	clean := filepath.Clean(name)
	return slices.ContainsFunc(p.HostPaths, func(dir string) bool {
		return dir == "/" || clean == dir || strings.HasPrefix(clean, dir+"/")
	})
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
