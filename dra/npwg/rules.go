package npwg

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

var (
	// ErrConfDirNotAllowed is the error of a NetworkAttachmentDefinition
	// with an empty spec.config in a namespace whose objects may not use
	// the operator's on-disk configurations.
	ErrConfDirNotAllowed = errors.New("on-disk configuration not allowed")
	// ErrPluginNotAllowed is the error of a network whose configuration
	// runs a plugin the operator does not allow.
	ErrPluginNotAllowed = errors.New("plugin type not allowed")
)

// ConfDir is the operator's directory of CNI configurations, where a
// NetworkAttachmentDefinition with an empty spec.config finds the one of
// its name (§3.4.1), and the namespaces whose objects may do so. A
// configuration of the directory is the operator's and trusted: it may
// name any object of the host. An object of another namespace does not
// get it: whoever may write a NetworkAttachmentDefinition there would
// otherwise run the operator's configuration under a name of their
// choosing (a network on the node's uplink, say), and learn from the
// error which files the directory holds.
type ConfDir struct {
	// Path is the directory (--npwg-conf-dir).
	Path string
	// Namespaces are those whose NetworkAttachmentDefinitions may use the
	// directory's configurations (--npwg-conf-namespaces); AllNamespaces
	// allows all, none (the default) none.
	Namespaces []string
}

// Validate says why the namespaces are not ones an operator can mean, or
// nil.
func (d ConfDir) Validate() error {
	var errs []error
	for _, ns := range d.Namespaces {
		if ns == AllNamespaces {
			continue
		}
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("namespace %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// OnDisk says whether the configuration of nad is the one of its name in
// the operator's directory: its spec.config is empty.
func OnDisk(nad *nadv1.NetworkAttachmentDefinition) bool {
	return strings.TrimSpace(nad.Spec.Config) == ""
}

// Allows says why nad, whose spec.config is empty, may not use the
// directory's configurations (wrapping ErrConfDirNotAllowed), or nil. It
// does not look into the directory: the error is the same whether a
// configuration of that name exists or not.
func (d ConfDir) Allows(nad *nadv1.NetworkAttachmentDefinition) error {
	if slices.Contains(d.Namespaces, AllNamespaces) || nad.Namespace != "" && slices.Contains(d.Namespaces, nad.Namespace) {
		return nil
	}
	dir := d.Path
	if dir == "" {
		dir = "--npwg-conf-dir"
	}
	return &ConfigError{NAD: nadName(nad), Err: fmt.Errorf("%w: spec.config is empty, and the NetworkAttachmentDefinitions of namespace %s may not use the operator's on-disk CNI configurations "+
		"(--npwg-conf-namespaces: %s), so the configuration named %q in %s is not read for it; set spec.config, or ask the operator to add namespace %s to --npwg-conf-namespaces",
		ErrConfDirNotAllowed, nad.Namespace, listOrNone(d.Namespaces), nad.Name, dir, nad.Namespace)}
}

// Load is the CNI configuration of nad as LoadConfig finds it, the
// directory read only for an object of a namespace it allows (Allows).
func (d ConfDir) Load(nad *nadv1.NetworkAttachmentDefinition) (*Config, error) {
	if nad != nil && OnDisk(nad) {
		if err := d.Allows(nad); err != nil {
			return nil, err
		}
	}
	return LoadConfig(nad, d.Path)
}

// ConfigRules are what a node holds the CNI configuration of a
// NetworkAttachmentDefinition to before it runs it: the node daemon
// (fastpathd run --npwg) and fastpathd validate judge with them alike.
type ConfigRules struct {
	// ConfDir is the operator's directory and who may use it.
	ConfDir ConfDir
	// Plugins are the plugin types (IPAM included) a configuration may
	// run (--cni-plugins): a tenant's network must not run any binary of
	// the node's CNI directories.
	Plugins []string
	// Policy says which objects of the host a spec.config may name.
	Policy Policy
}

// Config is the configuration the node runs for nad: ConfDir.Load's,
// every plugin type and IPAM type of it on Plugins, and for a spec.config
// only the objects of the host Policy allows (Policy.HostObjects). A
// refusal of the rules is a *ConfigError; LoadConfig's errors are as it
// gives them. Every error names the object.
func (r ConfigRules) Config(nad *nadv1.NetworkAttachmentDefinition) (*Config, error) {
	cfg, err := r.ConfDir.Load(nad)
	if err != nil {
		return nil, err
	}
	if err := AllowedPlugins(cfg, r.Plugins); err != nil {
		return nil, &ConfigError{NAD: nadName(nad), Source: cfg.Source, Err: err}
	}
	// A network given a device of the pod's claims has its master filled
	// from it (Invocation.GiveDevice).
	if err := r.Policy.HostObjects(cfg, nad.Annotations[ResourceNameAnnot] != ""); err != nil {
		return nil, &ConfigError{NAD: nadName(nad), Source: cfg.Source, Err: fmt.Errorf("%w (--npwg-host-devices, --npwg-host-paths, --npwg-host-options)", err)}
	}
	return cfg, nil
}

// AllowedPlugins says which plugin types (and IPAM types) of the
// configuration are not on the allowlist (wrapping ErrPluginNotAllowed),
// or nil.
func AllowedPlugins(cfg *Config, allowed []string) error {
	var bad []string
	for _, pc := range cfg.List.Plugins {
		types := []string{pc.Network.Type}
		if pc.Network.IPAM.Type != "" {
			types = append(types, pc.Network.IPAM.Type)
		}
		for _, t := range types {
			if !slices.Contains(allowed, t) && !slices.Contains(bad, t) {
				bad = append(bad, t)
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %q not on this node's allowlist %v (--cni-plugins): a network's configuration may run only the plugins the operator allows",
		ErrPluginNotAllowed, bad, allowed)
}

// ConfigError is a NetworkAttachmentDefinition's configuration refused by
// the node's rules.
type ConfigError struct {
	// NAD is the object's namespace/name.
	NAD string
	// Source is the configuration's (SourceSpec or a file's path); empty
	// when none was read.
	Source string
	// Err is what is wrong.
	Err error
}

func (e *ConfigError) Error() string {
	if e.Source == "" {
		return fmt.Sprintf("NetworkAttachmentDefinition %s: %v", e.NAD, e.Err)
	}
	return fmt.Sprintf("NetworkAttachmentDefinition %s: %s: %v", e.NAD, e.Source, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }
