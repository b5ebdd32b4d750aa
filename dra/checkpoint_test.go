package dra

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestCheckpointRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	cp := newCheckpoint()
	claim := testClaim("rt", []alloc{{"nic", vfNetdev}, {"dpdk", vfVFIO}},
		fromClaimFor("nic", config(`"interface": {"name": "net1", "addresses": ["10.0.0.2/24"]}, "vf": {"vlan": 7, "trust": false}`)),
		fromClaimFor("dpdk", config(`"mode": "vfio"`)))
	st, err := planClaim(t, claim, cp)
	if err != nil {
		t.Fatal(err)
	}
	cp.Claims[st.UID] = st
	if err := cp.save(path); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("checkpoint mode = %v, %v; want 0600", info.Mode(), err)
	}
	got, err := loadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, cp) {
		t.Errorf("round trip changed the checkpoint:\n got %+v\nwant %+v", got.Claims[st.UID], cp.Claims[st.UID])
	}
	// No temporary files are left beside it.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the checkpoint", len(entries))
	}
}

func TestCheckpointMissingIsEmpty(t *testing.T) {
	cp, err := loadCheckpoint(filepath.Join(t.TempDir(), "none.json"))
	if err != nil || len(cp.Claims) != 0 || cp.Version != CheckpointVersion {
		t.Errorf("missing checkpoint = %+v, %v", cp, err)
	}
}

func TestCheckpointRefusesOtherVersionsAndCorruption(t *testing.T) {
	for name, body := range map[string]string{
		"newer version": `{"version": 2, "claims": {}}`,
		"corrupt":       `{"version": 1, "claims": `,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := loadCheckpoint(path)
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("error = %v, want one naming %s", err, path)
			}
		})
	}
}
