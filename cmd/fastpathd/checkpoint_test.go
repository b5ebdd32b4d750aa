package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		{nil, 2, "want migrate"},
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
