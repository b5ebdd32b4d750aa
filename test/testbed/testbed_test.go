package testbed

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestParseVersions(t *testing.T) {
	v, err := parseVersions(versionsEnv)
	if err != nil {
		t.Fatalf("the shipped versions.env: %v", err)
	}
	if !strings.HasPrefix(v.Kubernetes, "v1.") || v.Etcd == "" || v.Containerd == "" {
		t.Errorf("versions = %+v", v)
	}
	for name, text := range map[string]string{
		"missing key":    "K8S_VERSION=v1.35.4\n",
		"malformed line": "K8S_VERSION v1.35.4\n",
	} {
		if _, err := parseVersions(text); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestUnescapeMountPoint(t *testing.T) {
	for in, want := range map[string]string{
		`/var/lib/a`:          "/var/lib/a",
		`/var/lib/with\040sp`: "/var/lib/with sp",
		`/tab\011x`:           "/tab\tx",
	} {
		if got := unescapeMountPoint(in); got != want {
			t.Errorf("unescapeMountPoint(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestProcessStartStop(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "sleep.log")
	p, err := startProcess("sleeper", log, nil, sleep, "600")
	if err != nil {
		t.Fatal(err)
	}
	if !p.alive() {
		t.Fatal("started process is not alive")
	}
	// A recorded process with the same PID but another start time is not ours.
	impostor := p
	impostor.StartTime++
	if impostor.alive() {
		t.Error("a process with a different start time counts as alive")
	}
	if err := p.stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if p.alive() {
		t.Error("process alive after stop")
	}
}

// A component does not take the caller's TMPDIR, which the caller may
// remove while the component runs on; what the bed gives it, it has.
func TestComponentEnvironment(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "env.log")
	p, err := startProcess("env", log, []string{"FROM_BED=1"}, sh, "-c", `echo "tmp=$TMPDIR bed=$FROM_BED"; exec sleep 600`)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.stop(5 * time.Second) }()
	var out []byte
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		out, _ = os.ReadFile(log)
		return len(out) > 0, nil
	})
	if err != nil || string(out) != "tmp= bed=1\n" {
		t.Errorf("the component saw %q (%v), want no TMPDIR and the bed's variable", out, err)
	}
}

func TestStartProcessFailure(t *testing.T) {
	log := filepath.Join(t.TempDir(), "x.log")
	_, err := startProcess("ghost", log, nil, "/no/such/binary")
	if err == nil {
		t.Fatal("no error for a missing binary")
	}
	var ce *ComponentError
	if !errors.As(err, &ce) || ce.Component != "ghost" {
		t.Errorf("error %v does not name the component", err)
	}
}

func TestComponentErrorShowsLogTail(t *testing.T) {
	log := filepath.Join(t.TempDir(), "c.log")
	if err := os.WriteFile(log, []byte("line1\nline2\nfatal: bad flag\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	msg := (&ComponentError{Component: "kubelet", Log: log, Err: os.ErrClosed}).Error()
	for _, want := range []string{"kubelet", log, "fatal: bad flag"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
}

func TestPKI(t *testing.T) {
	cfg, err := Config{Dir: t.TempDir(), CacheDir: t.TempDir(), RepoDir: "."}.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPKI(cfg.path("pki"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.ca)
	cert := readCert(t, p.file("apiserver.crt"))
	for _, host := range []string{"127.0.0.1", "localhost", cfg.ServiceCIDR.Addr().Next().String()} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("apiserver cert for %s: %v", host, err)
		}
	}
	client := readCert(t, p.file("kubelet-client.crt"))
	if _, err := client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("kubelet client cert: %v", err)
	}
	if got := client.Subject.Organization; len(got) != 1 || got[0] != "system:masters" {
		t.Errorf("kubelet client cert organization = %v", got)
	}
	tokens, err := os.ReadFile(p.file("tokens.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tokens), "system:node:"+cfg.NodeName) {
		t.Errorf("tokens.csv has no node identity:\n%s", tokens)
	}
	if st, err := os.Stat(p.file("ca.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("ca.key mode = %v, %v; want 0600", st.Mode(), err)
	}
	kc := p.kubeconfig(cfg, "admin", p.adminToken)
	if !strings.Contains(kc, net.JoinHostPort("127.0.0.1", "26443")) || !strings.Contains(kc, p.adminToken) {
		t.Errorf("kubeconfig:\n%s", kc)
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestComponentConfigs(t *testing.T) {
	cfg, err := Config{Dir: "/tmp/bed", CacheDir: "/tmp/cache", RepoDir: ".",
		FeatureGates: map[string]bool{"B": false, "A": true}}.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	if got := featureGatesFlag(cfg.FeatureGates); got != "A=true,B=false" {
		t.Errorf("feature gates flag = %q", got)
	}
	kubelet := kubeletConfig(cfg, &pki{dir: "/tmp/bed/pki"})
	for _, want := range []string{"cgroupRoot: /fastpath-testbed", "port: 26250", "featureGates: {A: true, B: false}", "/tmp/bed/containerd/containerd.sock"} {
		if !strings.Contains(kubelet, want) {
			t.Errorf("kubelet config lacks %q:\n%s", want, kubelet)
		}
	}
	ctrd := containerdConfig(cfg, binariesIn(cfg.CacheDir, Versions{Runc: "v1", CNIPlugins: "v2"}))
	for _, want := range []string{`socket_path = "/tmp/bed/nri/nri.sock"`, "netns_mounts_under_state_dir = true",
		`BinaryName = "/tmp/cache/bin/runc-v1/runc"`, `sandbox = "` + PauseImage + `"`, "enable_cdi = true", `cdi_spec_dirs = ["/tmp/bed/cdi"]`} {
		if !strings.Contains(ctrd, want) {
			t.Errorf("containerd config lacks %q:\n%s", want, ctrd)
		}
	}
	if cni := cniConfig(cfg); !strings.Contains(cni, `"bridge": "fptbr0"`) || !strings.Contains(cni, "10.214.0.0/24") {
		t.Errorf("CNI config:\n%s", cni)
	}
}

// A bed of another release gets the configuration that release reads:
// containerd 1.7's version 2 format, 2.0's one CNI directory, 2.2's list;
// the feature gates its Kubernetes knows; CRI-O's files all the bed's own.
func TestReleaseConfigs(t *testing.T) {
	for _, tc := range []struct {
		containerd string
		want, not  []string
	}{
		{"v1.7.32", []string{"version = 2", `[plugins."io.containerd.grpc.v1.cri"]`, `bin_dir = "/tmp/cache/bin/cni-plugins-v2"`, `sandbox_image = "` + PauseImage + `"`},
			[]string{"version = 3", "bin_dirs"}},
		{"v2.0.7", []string{"version = 3", `bin_dir = "/tmp/cache/bin/cni-plugins-v2"`}, []string{"bin_dirs"}},
		{"v2.2.9", []string{"version = 3", `bin_dirs = ["/tmp/cache/bin/cni-plugins-v2"]`}, []string{"bin_dir ="}},
	} {
		cfg, err := Config{Dir: "/tmp/bed", CacheDir: "/tmp/cache", RepoDir: ".", ContainerdVersion: tc.containerd}.Defaults()
		if err != nil {
			t.Fatal(err)
		}
		ctrd := containerdConfig(cfg, binariesIn(cfg.CacheDir, Versions{Runc: "v1", CNIPlugins: "v2"}))
		for _, w := range tc.want {
			if !strings.Contains(ctrd, w) {
				t.Errorf("containerd %s: config lacks %q:\n%s", tc.containerd, w, ctrd)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(ctrd, n) {
				t.Errorf("containerd %s: config has %q:\n%s", tc.containerd, n, ctrd)
			}
		}
	}
	for version, want := range map[string]map[string]bool{
		"v1.34.4": {"KubeletCrashLoopBackOffMax": true},
		"v1.35.4": {},
		"v1.36.3": {"DRAListTypeAttributes": true},
		"v1.37.2": {"DRAListTypeAttributes": true},
	} {
		cfg, err := Config{Dir: "/tmp/bed", CacheDir: "/tmp/cache", RepoDir: ".", KubernetesVersion: version}.Defaults()
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := cfg.Versions(); v.Kubernetes != version || !maps.Equal(cfg.FeatureGates, want) {
			t.Errorf("Kubernetes %s: a bed of %s with gates %v, want %v", version, v.Kubernetes, cfg.FeatureGates, want)
		}
	}
	cfg, err := Config{Dir: "/tmp/bed", CacheDir: "/tmp/cache", RepoDir: ".", Runtime: RuntimeCRIO}.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	crio := crioConfig(cfg, binariesIn(cfg.CacheDir, Versions{Runc: "v1", CNIPlugins: "v2", CRIO: "v3"}))
	for _, w := range []string{`listen = "/tmp/bed/crio/crio.sock"`, `nri_listen = "/tmp/bed/nri/nri.sock"`, `cdi_spec_dirs = ["/tmp/bed/cdi"]`,
		`pinns_path = "/tmp/cache/bin/crio-v3/pinns"`, `runtime_path = "/tmp/bed/crio/runc"`, `namespaces_dir = "/tmp/bed/crio/ns"`,
		`insecure_registries = ["127.0.0.1:26510"]`, "disable_hostport_mapping = true"} {
		if !strings.Contains(crio, w) {
			t.Errorf("CRI-O config lacks %q:\n%s", w, crio)
		}
	}
	if cfg.NetnsDir() != "/tmp/bed/crio/ns/netns" || cfg.runtimeSocket() != "/tmp/bed/crio/crio.sock" {
		t.Errorf("CRI-O bed: netns %s, socket %s", cfg.NetnsDir(), cfg.runtimeSocket())
	}
	if kubelet := kubeletConfig(cfg, &pki{dir: "/tmp/bed/pki"}); !strings.Contains(kubelet, "unix:///tmp/bed/crio/crio.sock") {
		t.Errorf("a CRI-O bed's kubelet does not talk to CRI-O:\n%s", kubelet)
	}
	if _, err := (Config{Dir: "/tmp/bed", CacheDir: "/tmp/cache", RepoDir: ".", Runtime: "docker"}).Defaults(); err == nil {
		t.Error("runtime docker accepted")
	}
}
