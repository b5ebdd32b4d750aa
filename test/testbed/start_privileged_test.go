//go:build privileged

package testbed

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"
)

// failingConfig is a bed of its own (directory, ports, link prefix, cgroup)
// that cannot clash with a bed the developer runs, whose etcd is a script
// that fails the way a bad flag makes etcd fail. The other binaries are
// never run.
func failingConfig(t *testing.T) Config {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("privileged test: run as root (make privileged)")
	}
	dir, err := os.MkdirTemp("", "fpx") // short: unix socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cfg, err := Config{
		Dir: filepath.Join(dir, "bed"), CacheDir: filepath.Join(dir, "cache"),
		LinkPrefix: "fpx", CgroupName: "fastpath-testbed-fail", NodeName: "fail-node",
		APIServerPort: 27443, EtcdPort: 23379, SchedulerPort: 27459, ControllerManagerPort: 27457,
		KubeletPort: 27250, KubeletHealthzPort: 27248,
	}.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	vers, err := parseVersions(versionsEnv)
	if err != nil {
		t.Fatal(err)
	}
	bins := binariesIn(cfg.CacheDir, vers)
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(bins.kubernetes, "kube-apiserver"), filepath.Join(bins.kubernetes, "kubelet"),
		filepath.Join(bins.containerd, "containerd"), filepath.Join(bins.runc, "runc"), filepath.Join(bins.cni, "bridge"),
		filepath.Join(bins.helm, "helm")} {
		write(f, "#!/bin/sh\nexit 99\n")
	}
	write(filepath.Join(bins.etcd, "etcd"), "#!/bin/sh\necho 'etcd: unknown flag --frobnicate' >&2\nexit 1\n")
	return cfg
}

// TestStartFailureTearsDown: a component that fails to start is named with
// its log, and the bed removes what it had started (node link, cgroups,
// processes, state).
func TestStartFailureTearsDown(t *testing.T) {
	cfg := failingConfig(t)
	_, ctx := ktesting.NewTestContext(t)
	_, err := Start(ctx, cfg)
	var ce *ComponentError
	if !errors.As(err, &ce) {
		t.Fatalf("Start = %v, want a ComponentError", err)
	}
	if ce.Component != "etcd" || ce.Log != cfg.LogFile("etcd") {
		t.Errorf("error names %q with log %q, want etcd with %s", ce.Component, ce.Log, cfg.LogFile("etcd"))
	}
	if !strings.Contains(err.Error(), "unknown flag --frobnicate") {
		t.Errorf("error %q does not show the end of etcd's log", err)
	}
	if left := Leftovers(cfg); len(left) > 0 {
		t.Errorf("the failed start left: %v", left)
	}
	if _, err := os.Stat(cfg.stateFile()); !os.IsNotExist(err) {
		t.Errorf("state file left after a failed start (%v)", err)
	}
	if running, err := Running(cfg); err != nil || running {
		t.Errorf("Running = %v, %v after a failed start", running, err)
	}
}

// TestStartRefusesTakenPort: a port in use is named before anything starts.
func TestStartRefusesTakenPort(t *testing.T) {
	cfg := failingConfig(t)
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(cfg.APIServerPort))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, ctx := ktesting.NewTestContext(t)
	_, err = Start(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "port 27443 for kube-apiserver is in use") {
		t.Errorf("Start = %v, want the taken port named", err)
	}
	if left := Leftovers(cfg); len(left) > 0 {
		t.Errorf("the refused start left: %v", left)
	}
}
