package dra

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/fastpath-dra/fastpath/dataplane/hostdir"
)

// The driver's directories (plugin, state, CDI) that group or others may
// write in are made private to their owner when it starts; a sticky one
// shared by every user (a CDI directory set to /tmp) is refused, and left
// as it is.
func TestNewMakesDirsPrivate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode
		err  error
	}{
		{"writable by all", 0o777, nil},
		{"sticky", 0o777 | os.ModeSticky, hostdir.ErrShared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{NodeName: testNode, Client: fake.NewClientset(), PluginDir: filepath.Join(dir, "plugin"),
				StateDir: filepath.Join(dir, "state"), CDIDir: filepath.Join(dir, "cdi"), Store: testStore(t)}
			for _, d := range []string{opts.PluginDir, opts.StateDir, opts.CDIDir} {
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(d, tc.mode); err != nil {
					t.Fatal(err)
				}
			}
			_, err := New(opts)
			if !errors.Is(err, tc.err) {
				t.Fatalf("New = %v, want %v", err, tc.err)
			}
			for _, d := range []string{opts.PluginDir, opts.StateDir, opts.CDIDir} {
				fi, err := os.Stat(d)
				if err != nil {
					t.Fatal(err)
				}
				if tc.err == nil && fi.Mode().Perm()&0o022 != 0 {
					t.Errorf("%s is mode %s after New, want no write bit for group or others", d, fi.Mode())
				}
				if tc.err != nil && fi.Mode() != tc.mode|os.ModeDir {
					t.Errorf("%s is mode %s after a refusal, want it left %s", d, fi.Mode(), tc.mode|os.ModeDir)
				}
			}
		})
	}
}

// A CDI spec's write killed before its rename leaves its temporary file
// in the CDI directory, or in its staging directory (writeCDISpec): the
// driver removes them when it starts, and leaves the specs.
func TestNewRemovesKilledCDIWrites(t *testing.T) {
	dir := t.TempDir()
	opts := Options{NodeName: testNode, Client: fake.NewClientset(), PluginDir: filepath.Join(dir, "plugin"),
		StateDir: filepath.Join(dir, "state"), CDIDir: filepath.Join(dir, "cdi"), Store: testStore(t)}
	spec := cdiSpecPath(opts.CDIDir, "uid-a")
	killed := filepath.Join(opts.CDIDir, "."+filepath.Base(cdiSpecPath(opts.CDIDir, "uid-b"))+".k1lled")
	staged := filepath.Join(opts.CDIDir, cdiStage, "."+filepath.Base(cdiSpecPath(opts.CDIDir, "uid-c"))+".k1lled")
	if err := os.MkdirAll(filepath.Dir(staged), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{spec, killed, staged} {
		if err := os.WriteFile(f, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(opts); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{killed, staged} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the killed write's temporary file %s after New: %v, want it removed", f, err)
		}
	}
	if _, err := os.Stat(spec); err != nil {
		t.Errorf("the CDI spec after New: %v", err)
	}
}
