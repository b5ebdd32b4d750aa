package netapi

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/fastpath-dra/fastpath/dataplane"
)

// StatusRunner runs CNI STATUS for a configuration list's plugins
// (dataplane.CNI).
type StatusRunner interface {
	Status(ctx context.Context, n dataplane.CNINetwork) error
}

var _ StatusRunner = (*dataplane.CNI)(nil)

// statusTimeout bounds one network's STATUS.
const statusTimeout = 10 * time.Second

// checker computes networks' statuses.
type checker struct {
	binDirs []string
	runner  StatusRunner
}

// status says what the node can do with a configuration list:
// sandbox_management when sandboxProblem finds nothing wrong with it;
// connectivity when, besides, the plugins answer STATUS (CNI 1.1; a list
// of an earlier version has no STATUS and passes).
func (c checker) status(ctx context.Context, conflist []byte) *NetworkStatus {
	if problem := c.sandboxProblem(conflist); problem != "" {
		return &NetworkStatus{Message: problem}
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	if err := c.runner.Status(ctx, dataplane.CNINetwork{Conflist: conflist}); err != nil {
		return &NetworkStatus{SandboxManagement: true, Message: fmt.Sprintf("CNI STATUS: %v", err)}
	}
	return &NetworkStatus{SandboxManagement: true, Connectivity: true}
}

// sandboxProblem says why sandboxes cannot be created with a
// configuration list on this node, "" when they can: it parses, names a
// cniVersion the CNI library runs, every plugin (IPAM included) has an
// executable in the bin directories, and the host interfaces its plugins
// name exist (hostLinkProblems). It runs no plugin.
func (c checker) sandboxProblem(conflist []byte) string {
	list, err := libcni.ConfListFromBytes(conflist)
	if err != nil {
		return fmt.Sprintf("not a configuration CNI reads: %v", err)
	}
	if supported := version.All.SupportedVersions(); !slices.Contains(supported, list.CNIVersion) {
		return fmt.Sprintf("cniVersion %q is not one this node's CNI library runs (%s)", list.CNIVersion, strings.Join(supported, ", "))
	}
	if len(list.Plugins) == 0 {
		return "no plugins"
	}
	var missing []string
	for _, t := range pluginTypes(list) {
		if !c.installed(t) {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("plugin %s: no executable in %s", strings.Join(missing, ", "), strings.Join(c.binDirs, ", "))
	}
	return strings.Join(hostLinkProblems(list), "; ")
}

// pluginTypes are the executables a list runs: its plugins' types and
// their IPAM's.
func pluginTypes(list *libcni.NetworkConfigList) []string {
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Network.Type)
		var conf struct {
			IPAM struct {
				Type string `json:"type"`
			} `json:"ipam"`
		}
		if json.Unmarshal(p.Bytes, &conf) == nil && conf.IPAM.Type != "" {
			types = append(types, conf.IPAM.Type)
		}
	}
	return types
}

// installed: a regular, executable file of that name in a bin directory
// (a type with a path separator is none: CNI looks types up by name).
func (c checker) installed(plugin string) bool {
	if plugin == "" || strings.ContainsRune(plugin, filepath.Separator) {
		return false
	}
	for _, dir := range c.binDirs {
		fi, err := os.Stat(filepath.Join(dir, plugin))
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return true
		}
	}
	return false
}
