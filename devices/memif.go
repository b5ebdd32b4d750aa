package devices

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/devices/memif"
)

// MemifConfig is the operator's file of static memif endpoints
// (--memif-config), for endpoints whose socket is not (yet) in --memif-dir.
//
//	apiVersion: fastpath.dev/v1alpha1
//	kind: MemifConfig
//	endpoints:
//	- name: fw0              # device memif-fw0
//	  role: slave            # the role the pod takes: slave connects, master serves
//	  mode: ethernet         # ethernet | ip | punt
//	  socketPath: /run/vswitch/fw0.sock  # in --memif-dir
//
// A slave endpoint's socketPath is the vswitch's socket the pod connects
// to. A master endpoint's socketPath is optional: the pod creates its
// socket in its own directory, and fastpath links socketPath to it so that
// the vswitch finds it there.
type MemifConfig struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Endpoints  []MemifEndpoint `json:"endpoints"`
}

// MemifEndpoint is one statically defined memif endpoint.
type MemifEndpoint struct {
	Name       string `json:"name"`
	Role       string `json:"role"`
	Mode       string `json:"mode,omitempty"`
	SocketPath string `json:"socketPath"`
}

// LoadMemifConfig reads and validates a memif config file. Unknown fields
// are errors; every error names the file and the field.
func LoadMemifConfig(path string) (*MemifConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("memif config: %w", err)
	}
	var c MemifConfig
	if err := decodeYAMLStrict(data, &c); err != nil {
		return nil, fmt.Errorf("memif config %s: %w", path, err)
	}
	if c.APIVersion != "fastpath.dev/v1alpha1" || c.Kind != "MemifConfig" {
		return nil, fmt.Errorf("memif config %s: apiVersion/kind = %q/%q, want fastpath.dev/v1alpha1/MemifConfig", path, c.APIVersion, c.Kind)
	}
	seen := map[string]bool{}
	for i := range c.Endpoints {
		e := &c.Endpoints[i]
		field := fmt.Sprintf("memif config %s: endpoints[%d]", path, i)
		if e.Mode == "" {
			e.Mode = MemifModeEthernet
		}
		switch {
		case e.Name == "":
			return nil, fmt.Errorf("%s.name: required", field)
		case validName(MemifDeviceName(e.Name)) != nil || MemifDeviceName(e.Name) != "memif-"+e.Name:
			return nil, fmt.Errorf("%s.name %q: must be lowercase letters, digits and '-'", field, e.Name)
		case seen[e.Name]:
			return nil, fmt.Errorf("%s.name %q: defined twice", field, e.Name)
		case e.Role != MemifRoleMaster && e.Role != MemifRoleSlave:
			return nil, fmt.Errorf("%s.role %q: want master or slave", field, e.Role)
		case e.Mode != MemifModeEthernet && e.Mode != MemifModeIP && e.Mode != MemifModePunt:
			return nil, fmt.Errorf("%s.mode %q: want ethernet, ip or punt", field, e.Mode)
		case e.SocketPath == "" && e.Role == MemifRoleSlave:
			return nil, fmt.Errorf("%s.socketPath: required for role slave", field)
		case e.SocketPath != "" && !filepath.IsAbs(e.SocketPath):
			return nil, fmt.Errorf("%s.socketPath %q: must be an absolute path", field, e.SocketPath)
		}
		seen[e.Name] = true
	}
	return &c, nil
}

// decodeYAMLStrict decodes YAML into v as the API server decodes objects:
// field names case-sensitive, unknown and duplicate fields errors.
func decodeYAMLStrict(data []byte, v any) error {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(js, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// checkDir checks that every socket path of the config is in dir, without
// following symlinks (Prepare follows them, when the sockets exist).
func (c *MemifConfig) checkDir(path, dir string) error {
	for i, e := range c.Endpoints {
		if e.SocketPath == "" {
			continue
		}
		if dir == "" {
			return fmt.Errorf("memif config %s: endpoints[%d].socketPath %q: give --memif-dir, the directory endpoint sockets live in", path, i, e.SocketPath)
		}
		rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(e.SocketPath))
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("memif config %s: endpoints[%d].socketPath %q: outside --memif-dir %s", path, i, e.SocketPath, dir)
		}
	}
	return nil
}

// probeTimeout bounds one endpoint's HELLO.
const probeTimeout = 500 * time.Millisecond

// probeMemif probes the slave endpoints, in parallel, for a HELLO; master
// endpoints (the pod serves) are healthy.
func probeMemif(ctx context.Context, devs []Device) {
	parallel(len(devs), func(i int) {
		m := devs[i].Memif
		if m.Role != MemifRoleSlave {
			m.Healthy = true
			return
		}
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		if _, err := memif.Probe(ctx, m.SocketPath); err != nil {
			m.Problem = err.Error()
			return
		}
		m.Healthy = true
	})
}

// discoverMemif lists the endpoints: sockets served in dir (the pod
// connects to them as slave, in ethernet mode) and the configured ones. A
// configured endpoint wins over a socket of the same name.
func discoverMemif(dir string, cfg *MemifConfig) ([]Device, []error) {
	byName := map[string]Device{}
	var warnings []error
	if dir != "" {
		entries, err := os.ReadDir(dir)
		if err != nil {
			warnings = append(warnings, fmt.Errorf("memif directory: %w", err))
		}
		for _, e := range entries {
			if e.Type()&os.ModeSocket == 0 {
				continue
			}
			name := strings.TrimSuffix(e.Name(), ".sock")
			dev := MemifDeviceName(name)
			if err := validName(dev); err != nil || dev != "memif-"+name {
				warnings = append(warnings, fmt.Errorf("skipping memif socket %s: its name must be lowercase letters, digits and '-'", filepath.Join(dir, e.Name())))
				continue
			}
			byName[name] = Device{Name: dev, Kind: KindMemif, Memif: &Memif{
				Role: MemifRoleSlave, Mode: MemifModeEthernet, SocketPath: filepath.Join(dir, e.Name()), Source: "dir",
			}}
		}
	}
	if cfg != nil {
		for _, e := range cfg.Endpoints {
			byName[e.Name] = Device{Name: MemifDeviceName(e.Name), Kind: KindMemif, Memif: &Memif{
				Role: e.Role, Mode: e.Mode, SocketPath: e.SocketPath, Source: "config",
			}}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Device, 0, len(names))
	for _, n := range names {
		out = append(out, byName[n])
	}
	return out, warnings
}
