package netapi

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// FallbackName is the reserved network of the node's CNI configuration
// directory.
const FallbackName = "_fallback"

var (
	// ErrReserved is the error of setting or removing a reserved network
	// ("_fallback", and every name starting with "_").
	ErrReserved = errors.New("reserved network")
	// ErrNotFound is the error of a network the registry does not hold.
	ErrNotFound = errors.New("no such network")
)

// FieldError is an input that is not valid: the field, and what is wrong
// with it.
type FieldError struct {
	Field  string // e.g. config.cniv1_config.plugins[0].type
	Detail string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Detail }

// listVersion is the first CNI version with configuration lists.
const listVersion = "0.3.0"

// networkName: a CNI network name (alphanumerics, '_', '-', '.'), starting
// with an alphanumeric; names starting with '_' are reserved.
var networkName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

func validName(name string) error {
	switch {
	case name == "":
		return errors.New("must not be empty")
	case len(name) > 253:
		return errors.New("must be at most 253 characters")
	case !networkName.MatchString(name):
		return errors.New("must be letters, digits, '_', '-' and '.', starting with a letter or digit")
	}
	return nil
}

// ValidateConfig checks a NetworkConfig to set: every field, then the
// configuration list it makes as libcni reads it. The error is a
// *FieldError, or wraps ErrReserved for a reserved name.
func ValidateConfig(cfg *NetworkConfig) error {
	if cfg == nil {
		return &FieldError{"config", "required"}
	}
	name := cfg.GetMetadata().GetName()
	if strings.HasPrefix(name, "_") {
		return fmt.Errorf("network %q: %w: names starting with '_' are the node's (%s is its CNI configuration directory's first file: change that file instead)", name, ErrReserved, FallbackName)
	}
	if err := validName(name); err != nil {
		return &FieldError{"config.metadata.name", err.Error()}
	}
	if cfg.GetNetworkType() != NetworkType_CNIv1 {
		return &FieldError{"config.network_type", fmt.Sprintf("%d: the one type is CNIv1 (0)", cfg.GetNetworkType())}
	}
	for i, r := range cfg.GetIpRanges() {
		p, err := netip.ParsePrefix(r.GetCidr())
		if err != nil {
			return &FieldError{fmt.Sprintf("config.ip_ranges[%d].cidr", i), fmt.Sprintf("%q: not a CIDR, e.g. 10.10.0.0/16", r.GetCidr())}
		}
		if p.Masked() != p {
			return &FieldError{fmt.Sprintf("config.ip_ranges[%d].cidr", i), fmt.Sprintf("%q: must be the subnet's address: %s", r.GetCidr(), p.Masked())}
		}
	}
	c := cfg.GetCniv1Config()
	if c == nil {
		return &FieldError{"config.cniv1_config", "required"}
	}
	if err := checkVersion(c.GetCniVersion()); err != nil {
		return &FieldError{"config.cniv1_config.cni_version", err.Error()}
	}
	if n := c.GetNetworkName(); n != "" {
		if err := validName(n); err != nil {
			return &FieldError{"config.cniv1_config.network_name", err.Error()}
		}
	}
	if len(c.GetPlugins()) == 0 {
		return &FieldError{"config.cniv1_config.plugins", "must name at least one plugin"}
	}
	for i, p := range c.GetPlugins() {
		path := fmt.Sprintf("config.cniv1_config.plugins[%d]", i)
		if err := v1alpha1.ValidCNIPluginType(p.GetType()); err != nil {
			return &FieldError{path + ".type", fmt.Sprintf("%q: %v", p.GetType(), err)}
		}
		for j, cap := range p.GetCapabilities() {
			if cap == "" || slices.Contains(p.GetCapabilities()[:j], cap) {
				return &FieldError{fmt.Sprintf("%s.capabilities[%d]", path, j), fmt.Sprintf("%q: must be a capability's name, once", cap)}
			}
		}
		for k := range p.GetParameters() {
			if _, ok := reservedParameter(k); ok {
				return &FieldError{fmt.Sprintf("%s.parameters[%q]", path, k), "not a parameter: set type and capabilities in their fields; name and cniVersion are the configuration's, runtimeConfig the runtime's"}
			}
		}
	}
	data, err := Conflist(cfg)
	if err != nil {
		return &FieldError{"config.cniv1_config", err.Error()}
	}
	if _, err := libcni.ConfListFromBytes(data); err != nil {
		return &FieldError{"config.cniv1_config", fmt.Sprintf("not a configuration list CNI reads: %v", err)}
	}
	return nil
}

// checkVersion: a cniVersion this node's CNI library runs, of
// configuration lists.
func checkVersion(v string) error {
	supported := version.All.SupportedVersions()
	switch {
	case v == "":
		return fmt.Errorf("required: one of %s", strings.Join(supported, ", "))
	case !slices.Contains(supported, v):
		return fmt.Errorf("%q: not one this node's CNI library runs (%s)", v, strings.Join(supported, ", "))
	}
	if ok, err := version.GreaterThanOrEqualTo(v, listVersion); err != nil || !ok {
		return fmt.Errorf("%q: configuration lists need %s or later", v, listVersion)
	}
	return nil
}
