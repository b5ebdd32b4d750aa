package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

func TestExitCodes(t *testing.T) {
	missingKubeconfig := filepath.Join(t.TempDir(), "missing.kubeconfig")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string // in stdout
		wantErr  string // in stderr
	}{
		{name: "no command", args: nil, wantCode: 2, wantErr: "Usage:"},
		{name: "help", args: []string{"--help"}, wantCode: 0, wantOut: "fastpathd run"},
		{name: "version", args: []string{"--version"}, wantCode: 0, wantOut: "fastpathd dev (go"},
		{name: "unknown command", args: []string{"frobnicate"}, wantCode: 2, wantErr: `unknown command "frobnicate"`},
		{name: "run without node name", args: []string{"run"}, wantCode: 2, wantErr: "--node-name"},
		{name: "run with unknown flag", args: []string{"run", "--no-such-flag"}, wantCode: 2, wantErr: "no-such-flag"},
		{name: "run with stray argument", args: []string{"run", "--node-name", "n", "extra"}, wantCode: 2, wantErr: "unexpected arguments"},
		{name: "run with bad metrics address", args: []string{"run", "--node-name", "n", "--metrics-addr", "nonsense"}, wantCode: 2, wantErr: "--metrics-addr"},
		{name: "run with missing kubeconfig", args: []string{"run", "--node-name", "n", "--kubeconfig", missingKubeconfig}, wantCode: 2, wantErr: missingKubeconfig},
		{name: "run help", args: []string{"run", "--help"}, wantCode: 0, wantErr: "-node-name"},
		{name: "inventory bad output", args: []string{"inventory", "-o", "yaml"}, wantCode: 2, wantErr: `-o "yaml"`},
		{name: "inventory missing sysfs root", args: []string{"inventory", "--sysfs-root", "/no/such/dir"}, wantCode: 2, wantErr: "/no/such/dir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NODE_NAME", "")
			var stdout, stderr bytes.Buffer
			code := runMain(tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d; stderr:\n%s", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.wantOut) {
				t.Errorf("stdout = %q, want it to contain %q", stdout.String(), tt.wantOut)
			}
			if !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tt.wantErr)
			}
		})
	}
}

func TestNodeNameFromEnvironment(t *testing.T) {
	t.Setenv("NODE_NAME", "node-from-env")
	var o runOptions
	fs := newFlagSet("run", &bytes.Buffer{})
	o.addFlags(fs)
	if err := parseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	if o.nodeName != "node-from-env" {
		t.Errorf("node name = %q, want it from $NODE_NAME", o.nodeName)
	}
}
