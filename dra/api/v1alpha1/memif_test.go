package v1alpha1

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestMemifConfigErrors(t *testing.T) {
	head := "apiVersion: fastpath.dev/v1alpha1\nkind: MemifConfig\nendpoints:\n"
	for name, tc := range map[string]struct{ body, want string }{
		"unknown field": {head + "- {name: a, role: slave, socketPath: /a, colour: red}\n", "colour"},
		"field case":    {head + "- {nAme: a, role: slave, socketPath: /a}\n", "nAme"},
		"duplicate key": {head + "- {name: a, name: b, role: slave, socketPath: /a}\n", "name"},
		"bad role":      {head + "- {name: a, role: boss, socketPath: /a}\n", "endpoints[0].role"},
		"bad mode":      {head + "- {name: a, role: slave, mode: tun, socketPath: /a}\n", "endpoints[0].mode"},
		"relative path": {head + "- {name: a, role: slave, socketPath: a.sock}\n", "endpoints[0].socketPath"},
		"slave no path": {head + "- {name: a, role: slave}\n", "endpoints[0].socketPath"},
		"bad name":      {head + "- {name: A_1, role: slave, socketPath: /a}\n", "endpoints[0].name"},
		"duplicate":     {head + "- {name: a, role: slave, socketPath: /a}\n- {name: a, role: slave, socketPath: /b}\n", "endpoints[1].name"},
		"wrong kind":    {"apiVersion: v1\nkind: ConfigMap\n", "apiVersion: Invalid value: \"v1/ConfigMap\""},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "memif.yaml")
			writeFile(t, path, tc.body)
			_, err := LoadMemifConfig(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error = %v, want it to name %s and %q", err, path, tc.want)
			}
		})
	}
}

// A file that cannot be read is an error naming it.
func TestLoadMemifConfigMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-file.yaml")
	if _, err := LoadMemifConfig(path); err == nil || !strings.Contains(err.Error(), "memif config") || !strings.Contains(err.Error(), path) {
		t.Errorf("error = %v, want a memif config error naming %s", err, path)
	}
}

// A valid file loads defaulted: a mode left out is ethernet.
func TestLoadMemifConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memif.yaml")
	writeFile(t, path, "apiVersion: fastpath.dev/v1alpha1\nkind: MemifConfig\nendpoints:\n"+
		"- {name: vpp1, role: master, mode: ip, socketPath: /run/memif/vpp1.sock}\n- {name: fw0, role: master}\n")
	c, err := LoadMemifConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []MemifEndpoint{
		{Name: "vpp1", Role: MemifRoleMaster, Mode: MemifModeIP, SocketPath: "/run/memif/vpp1.sock"},
		{Name: "fw0", Role: MemifRoleMaster, Mode: MemifModeEthernet},
	}
	if !slices.Equal(c.Endpoints, want) {
		t.Errorf("endpoints = %+v, want %+v", c.Endpoints, want)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
