package kubelet

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// TestSweepMetadata: the device metadata of claims the store does not
// hold (a daemon of the previous release unprepared them) is removed,
// CDI spec and plugin directory files; that of the claims it holds, and
// every other file, is kept. While a record is held aside, its claim's
// spec and every plugin directory's files are kept.
func TestSweepMetadata(t *testing.T) {
	const nic, cni = "fastpath.dev", "cni.dra.networking.x-k8s.io"
	held := []claims.Claim{
		{Driver: nic, UID: "uid-web", Namespace: "default", Name: "web-nic", Pod: claims.Pod{UID: "pod-web", Name: "web"}, Prepared: true},
		{Driver: cni, UID: "uid-db", Namespace: "db", Name: "db-net", Pod: claims.Pod{UID: "pod-db", Name: "db"}, Prepared: true},
		{Driver: nic, UID: "uid-late", Namespace: "default", Name: "late-nic", Pod: claims.Pod{UID: "pod-late", Name: "late"}, Prepared: true},
	}
	setup := func(t *testing.T) (path, cdiDir string, pluginDirs map[string]string) {
		dir := t.TempDir()
		path, cdiDir = filepath.Join(dir, "state", "checkpoint.json"), filepath.Join(dir, "cdi")
		pluginDirs = map[string]string{nic: filepath.Join(dir, "plugins", nic), cni: filepath.Join(dir, "plugins", cni)}
		store, err := claims.Open(path, claims.Legacy{})
		if err != nil {
			t.Fatal(err)
		}
		store.SetJournal(false)
		for _, c := range held {
			if err := store.Put(c); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []string{
			filepath.Join(cdiDir, nic+"_metadata_uid-web_nic.json"),
			filepath.Join(cdiDir, nic+"_metadata_uid-gone_nic.json"),
			filepath.Join(cdiDir, nic+"_metadata_uid-late_nic.json"),
			filepath.Join(cdiDir, cni+"_metadata_uid-db_net.json"),
			filepath.Join(cdiDir, cni+"_metadata_uid-web_net.json"), // the UID of another driver's claim
			filepath.Join(cdiDir, nic+"-claim-uid-gone.json"),       // fastpath's own, not metadata
			filepath.Join(cdiDir, "example.com_metadata_uid-gone_gpu.json"),
			filepath.Join(pluginDirs[nic], "dra-device-metadata", "default_web-nic", "nic", "metadata.json"),
			filepath.Join(pluginDirs[nic], "dra-device-metadata", "default_gone-nic", "nic", "metadata.json"),
			filepath.Join(pluginDirs[cni], "dra-device-metadata", "db_db-net", "net", "metadata.json"),
			filepath.Join(pluginDirs[cni], "dra-device-metadata", "default_web-nic", "net", "metadata.json"),
		} {
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return path, cdiDir, pluginDirs
	}
	sweep := func(t *testing.T, path, cdiDir string, pluginDirs map[string]string) []string {
		store, err := claims.Open(path, claims.Legacy{})
		if err != nil {
			t.Fatal(err)
		}
		removed, err := SweepMetadata(store, cdiDir, pluginDirs)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range removed {
			if _, err := os.Lstat(f); !os.IsNotExist(err) {
				t.Errorf("%s is said removed, and is there: %v", f, err)
			}
		}
		slices.Sort(removed)
		return removed
	}

	t.Run("claims held", func(t *testing.T) {
		path, cdiDir, pluginDirs := setup(t)
		got := sweep(t, path, cdiDir, pluginDirs)
		want := []string{
			filepath.Join(cdiDir, cni+"_metadata_uid-web_net.json"),
			filepath.Join(cdiDir, nic+"_metadata_uid-gone_nic.json"),
			filepath.Join(pluginDirs[cni], "dra-device-metadata", "default_web-nic"),
			filepath.Join(pluginDirs[nic], "dra-device-metadata", "default_gone-nic"),
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("removed %q, want %q", got, want)
		}
		if again := sweep(t, path, cdiDir, pluginDirs); len(again) != 0 {
			t.Errorf("a second sweep removed %q", again)
		}
	})

	t.Run("a record held aside", func(t *testing.T) {
		path, cdiDir, pluginDirs := setup(t)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(data, []byte("late-nic"))
		if i < 0 {
			t.Fatalf("the checkpoint does not hold late-nic:\n%s", data)
		}
		copy(data[i:], "lame-nic")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got := sweep(t, path, cdiDir, pluginDirs)
		want := []string{
			filepath.Join(cdiDir, cni+"_metadata_uid-web_net.json"),
			filepath.Join(cdiDir, nic+"_metadata_uid-gone_nic.json"),
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("removed %q, want %q: the held record's spec and the plugin directories kept", got, want)
		}
	})
}
