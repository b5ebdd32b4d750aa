package devices

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fastpath-dra/fastpath/devices/memif"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MemifConfig is the operator's file of static memif endpoints
// (--memif-config); see v1alpha1.MemifConfig.
type MemifConfig = v1alpha1.MemifConfig

// LoadMemifConfig reads, decodes (strictly: unknown, misspelt and duplicate
// fields are errors) and checks a memif config file. Every error names the
// file and the field.
func LoadMemifConfig(path string) (*MemifConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("memif config: %w", err)
	}
	return parseMemifConfig(path, data)
}

// parseMemifConfig is LoadMemifConfig of data, read from path.
func parseMemifConfig(path string, data []byte) (*MemifConfig, error) {
	c, errs := v1alpha1.DecodeMemifConfig(data, field.NewPath("memifConfig"))
	if len(errs) == 0 {
		c.Default()
		errs = c.Validate(field.NewPath("memifConfig"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("memif config %s: %w", path, errs.ToAggregate())
	}
	return &c, nil
}

// checkDir checks that every socket path of the config is in dir, without
// following symlinks (Prepare follows them, when the sockets exist).
func checkMemifDir(c *MemifConfig, path, dir string) error {
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
