package nri

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/klog/v2"
)

// Runtime is the container runtime the plugin is connected to, as it
// said when it configured the plugin.
type Runtime struct {
	// Name and Version are the runtime's ("containerd" "v2.2.9",
	// "cri-o" "1.34.0").
	Name, Version string
	// NRIVersion is the version of NRI the runtime runs: as it said,
	// else inferred from its name and version (runtimeNRIVersion), else
	// "unknown".
	NRIVersion string
}

func (r Runtime) String() string {
	return fmt.Sprintf("%s %s (NRI %s)", r.Name, r.Version, r.NRIVersion)
}

// RuntimeFeature is something fastpath uses that a runtime's NRI has from
// a version on.
type RuntimeFeature struct {
	// Name is the feature's, as in fastpath_runtime_feature{feature}.
	Name string
	// Since is the first NRI version that has it.
	Since string
	// Without is what fastpath does on a runtime without it.
	Without string
}

// RuntimeFeatures are the NRI features fastpath depends on.
var RuntimeFeatures = []RuntimeFeature{{
	Name:  "required_plugins",
	Since: "v0.10.0",
	Without: "the runtime has no default NRI validator, so required-plugins.noderesource.dev is not enforced: a pod that requires fastpath " +
		"may start while fastpathd is not connected, without its devices and networks until fastpathd connects and attaches them",
}}

// Has says whether the runtime's NRI has f; known is false when its NRI
// version is unknown (a runtime NRI's table does not list), and then has
// is true: fastpath does not turn off what it cannot tell is missing.
func (r Runtime) Has(f RuntimeFeature) (has, known bool) {
	v, err := utilversion.ParseSemantic(r.NRIVersion)
	if err != nil || r.NRIVersion == api.UnknownVersion || r.NRIVersion == api.DevelVersion {
		return true, false
	}
	return v.AtLeast(utilversion.MustParseSemantic(f.Since)), true
}

// runtimeNRI are the NRI versions of runtime releases (by name, then
// version) where NRI's own table (api.InferVersionFromRuntime) is wrong:
// CRI-O 1.34.0 requires NRI v0.9.1-0.20250219030224-e597e7849f24 (its
// go.mod), without the default validator, where NRI's table says v0.10.0.
var runtimeNRI = map[string]map[string]string{
	"cri-o": {"v1.34.0": "v0.9.1-0.20250219030224-e597e7849f24"},
}

// runtimeNRIVersion is the NRI version of the runtime name at version:
// runtimeNRI's, else said (what the runtime said, or NRI's stub inferred
// from its version as the runtime wrote it), else NRI's table's for the
// version written as the table writes them ("1.34.0" and "2.2.9+unknown"
// as "v1.34.0" and "v2.2.9"), else "unknown". Runtimes before NRI v0.12
// do not say it.
func runtimeNRIVersion(said, name, version string) string {
	v := "v" + strings.TrimPrefix(strings.TrimSpace(version), "v")
	if i := strings.IndexAny(v, "+ "); i >= 0 {
		v = v[:i]
	}
	if nri, ok := runtimeNRI[name][v]; ok {
		return nri
	}
	switch said {
	case "", "unknown", api.UnknownVersion, api.DevelVersion:
	default:
		return said
	}
	if nri, err := api.InferVersionFromRuntime(name, v); err == nil && nri != api.UnknownVersion {
		return nri
	}
	return "unknown"
}

// Runtime is the runtime connected now, or last; false before the first
// connection.
func (p *Plugin) Runtime() (Runtime, bool) {
	p.conn.mu.Lock()
	defer p.conn.mu.Unlock()
	return p.conn.runtime, p.conn.runtime.Name != ""
}

// Configure learns which runtime connected, from what it says (NRI's
// stub has put its NRI version, or the one inferred, where RuntimeNRIVersion
// reads it), and tells Options.OnRuntime.
func (h *hooks) Configure(ctx context.Context, _, runtime, version string) (api.EventMask, error) {
	said := ""
	if h.stub != nil {
		said = h.stub.RuntimeNRIVersion()
	}
	r := Runtime{Name: runtime, Version: version, NRIVersion: runtimeNRIVersion(said, runtime, version)}
	h.p.conn.mu.Lock()
	changed := h.p.conn.runtime != r
	h.p.conn.runtime = r
	h.p.conn.mu.Unlock()
	if changed {
		klog.FromContext(ctx).Info("Runtime connected", "runtime", r.Name, "version", r.Version, "nriVersion", r.NRIVersion)
		if f := h.p.opts.OnRuntime; f != nil {
			f(ctx, r)
		}
	}
	return 0, nil
}

var _ stub.ConfigureInterface = (*hooks)(nil)
