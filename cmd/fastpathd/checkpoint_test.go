package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

func TestCheckpointMigrate(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"checkpoint.json", "cni/cni-checkpoint.json"} {
		data, err := os.ReadFile(filepath.Join("../../dra/claims/testdata/v1", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := runMain(append([]string{"checkpoint"}, args...), &out, &out)
		return code, out.String()
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "want migrate, verify or repair"},
		{[]string{"show"}, 2, `unknown "show"`},
		{[]string{"migrate", "--state-dir", dir}, 2, `--to "": want a version`},
		{[]string{"migrate", "--state-dir", dir, "--to", "4"}, 1, "version 4: this fastpathd writes versions [1 2 3]"},
		{[]string{"migrate", "--state-dir", dir, "--to", "3"}, 0, "checkpoint.json: version 3"},
		{[]string{"migrate", "--state-dir", dir, "--to", "2"}, 0, "checkpoint.json: version 2"},
		{[]string{"migrate", "--state-dir", dir, "--to", "1"}, 0, "checkpoint.json: version 1"},
		{[]string{"migrate", "--state-dir", dir, "--to", "2", "extra"}, 2, "unexpected arguments"},
	} {
		code, out := run(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("fastpathd checkpoint %v: exit %d, %q; want exit %d and %q", tc.args, code, out, tc.code, tc.want)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "checkpoint.json"))
	if err != nil || !bytes.HasPrefix(data, []byte(`{"version":1,`)) {
		t.Errorf("after --to 1: %.40s, %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cni", "cni-checkpoint.json")); err != nil {
		t.Errorf("after --to 1, the CNI driver's file: %v", err)
	}
}

// A record the disk changed: verify names it and exits 1, repair --drop
// drops it (and refuses a claim whose record is sound), and verify is
// clean again.
func TestCheckpointVerifyRepair(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint.json")
	store, err := claims.Open(path, claims.Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"uid-1", "uid-2"} {
		c := claims.Claim{Driver: "fastpath.dev", UID: types.UID(uid), Namespace: "ns", Name: "c-" + uid, Pod: claims.Pod{UID: "pod-" + types.UID(uid)}}
		if err := store.Put(c); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(claims.JournalPath(path))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(claims.JournalPath(path), bytes.Replace(data, []byte(`"c-uid-2"`), []byte(`"c-uid-X"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := runMain(append([]string{"checkpoint"}, args...), &out, &out)
		return code, out.String()
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"verify", "--state-dir", dir}, 1, "corrupt: claim fastpath.dev/uid-2 in " + claims.JournalPath(path) + " line 1: checksum"},
		{[]string{"repair", "--state-dir", dir}, 2, "want --drop CLAIM"},
		{[]string{"repair", "--state-dir", dir, "--drop", "fastpath.dev/uid-1"}, 1, "claim fastpath.dev/uid-1: not held aside"},
		{[]string{"repair", "--state-dir", dir, "--drop", "fastpath.dev/uid-2"}, 0, "dropped fastpath.dev/uid-2"},
		{[]string{"verify", "--state-dir", dir}, 0, "1 claims, 0 corrupt"},
	} {
		code, out := run(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("fastpathd checkpoint %v: exit %d, %q; want exit %d and %q", tc.args, code, out, tc.code, tc.want)
		}
	}
}
