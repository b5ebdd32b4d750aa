package hostdir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// A directory made has the mode asked for; one that exists keeps its mode
// but the write bits of group and others that the mode asked for has not,
// whatever the umask; a sticky one writable by others is refused and left
// as it is.
func TestMake(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing fs.FileMode // 0: made by Make
		perm     fs.FileMode
		want     fs.FileMode
		err      error
	}{
		{name: "new", perm: 0o750, want: 0o750},
		{name: "private", existing: 0o700, perm: 0o750, want: 0o700},
		{name: "world-writable", existing: 0o777, perm: 0o750, want: 0o755},
		{name: "group-writable", existing: 0o770, perm: 0o700, want: 0o750},
		{name: "others may write as asked", existing: 0o777, perm: 0o777, want: 0o777},
		{name: "setgid kept", existing: 0o2777, perm: 0o750, want: 0o2755},
		{name: "sticky", existing: 0o1777, perm: 0o750, want: 0o1777, err: ErrShared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state", "sub")
			if tc.existing != 0 {
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, goMode(tc.existing)); err != nil {
					t.Fatal(err)
				}
			}
			err := Make(dir, tc.perm)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Make = %v, want %v", err, tc.err)
			}
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			if tc.existing == 0 {
				want &^= umask(t)
			}
			if got := unixMode(fi.Mode()); got != want {
				t.Errorf("mode %o, want %o", got, want)
			}
		})
	}
}

func TestMakeRefusesAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Make(path, 0o700); err == nil {
		t.Error("Make of a file succeeded")
	}
}

// goMode is a Unix mode (with its setgid and sticky bits) as fs.FileMode.
func goMode(m fs.FileMode) fs.FileMode {
	out := m & fs.ModePerm
	if m&0o2000 != 0 {
		out |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= fs.ModeSticky
	}
	return out
}

// unixMode is goMode's inverse.
func unixMode(m fs.FileMode) fs.FileMode {
	out := m & fs.ModePerm
	if m&fs.ModeSetgid != 0 {
		out |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		out |= 0o1000
	}
	return out
}

// umask is the process's umask, read from a file made with mode 0777.
func umask(t *testing.T) fs.FileMode {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "probe")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	return 0o777 &^ fi.Mode().Perm()
}
