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
)

// MemifEndpoint is a statically defined memif endpoint: one the operator
// configured (--memif-config), for a socket not (yet) in Options.MemifDir.
type MemifEndpoint struct {
	// Name makes the device name, memif-NAME.
	Name string
	// Role is the role the pod takes: MemifRoleSlave connects, MemifRoleMaster
	// serves.
	Role string
	// Mode is MemifModeEthernet, MemifModeIP or MemifModePunt.
	Mode string
	// SocketPath is the socket, in Options.MemifDir: the vswitch's, which
	// the pod connects to (slave); where the pod's is linked (master,
	// optional).
	SocketPath string
}

// checkMemifDir checks that every socket path of the endpoints is in dir,
// without following symlinks (Prepare follows them, when the sockets
// exist). source names where the endpoints were read, for errors.
func checkMemifDir(endpoints []MemifEndpoint, source, dir string) error {
	where := "memif config"
	if source != "" {
		where += " " + source
	}
	for i, e := range endpoints {
		if e.SocketPath == "" {
			continue
		}
		if dir == "" {
			return fmt.Errorf("%s: endpoints[%d].socketPath %q: give --memif-dir, the directory endpoint sockets live in", where, i, e.SocketPath)
		}
		rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(e.SocketPath))
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("%s: endpoints[%d].socketPath %q: outside --memif-dir %s", where, i, e.SocketPath, dir)
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
func discoverMemif(dir string, endpoints []MemifEndpoint) ([]Device, []error) {
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
	for _, e := range endpoints {
		byName[e.Name] = Device{Name: MemifDeviceName(e.Name), Kind: KindMemif, Memif: &Memif{
			Role: e.Role, Mode: e.Mode, SocketPath: e.SocketPath, Source: "config",
		}}
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
