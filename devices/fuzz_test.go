package devices

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoadMemifConfig: whatever the operator's file holds, loading it never
// panics, and what it accepts is valid. The file is in memory: the read is
// LoadMemifConfig's only other step.
func FuzzLoadMemifConfig(f *testing.F) {
	f.Add("apiVersion: fastpath.dev/v1alpha1\nkind: MemifConfig\nendpoints:\n- {name: fw0, role: slave, socketPath: /run/fw0.sock}\n")
	f.Add("apiVersion: fastpath.dev/v1alpha1\nkind: MemifConfig\nendpoints:\n- {name: a, role: master, mode: punt, socketPath: /a}\n- {name: b, role: slave, mode: ip, socketPath: /b}\n")
	f.Add(`{"apiVersion": "fastpath.dev/v1alpha1", "kind": "MemifConfig", "endpoints": [{"name": "x"}]}`)
	f.Add("endpoints: [[[")
	const path = "/etc/fastpath/memif.yaml"
	f.Fuzz(func(t *testing.T, body string) {
		cfg, err := parseMemifConfig(path, []byte(body))
		if err != nil {
			if !strings.Contains(err.Error(), path) && !strings.Contains(err.Error(), "memif config") {
				t.Errorf("error %q names neither the file nor the memif config", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, e := range cfg.Endpoints {
			// A slave endpoint's socket is required; a master's is optional
			// (the pod creates the socket), and absolute when given.
			badPath := (e.Role == MemifRoleSlave || e.SocketPath != "") && !filepath.IsAbs(e.SocketPath)
			if validName(MemifDeviceName(e.Name)) != nil || seen[e.Name] || badPath ||
				(e.Role != MemifRoleMaster && e.Role != MemifRoleSlave) ||
				(e.Mode != MemifModeEthernet && e.Mode != MemifModeIP && e.Mode != MemifModePunt) {
				t.Errorf("accepted an invalid endpoint %+v", e)
			}
			seen[e.Name] = true
		}
	})
}
