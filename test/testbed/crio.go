package testbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The CRI-O node (Config.Runtime RuntimeCRIO): CRI-O built by
// test/deps.sh, Debian's conmon, the bed's runc, and the bed's registry
// serving its images (registry.go).

// startCRIO starts the registry and CRI-O, and has CRI-O pull the bed's
// images.
func (b *Bed) startCRIO(ctx context.Context, bins binaries, archives []string) error {
	cfg := b.cfg
	for _, d := range []string{cfg.path("crio", "conf.d"), cfg.registryDir()} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	files := map[string]string{
		cfg.path("crio", "crio.conf"):       crioConfig(cfg, bins),
		cfg.path("crio", "registries.conf"): crioRegistries(cfg),
		cfg.path("crio", "policy.json"):     crioPolicy,
		cfg.path("crio", "storage.conf"): fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %q\nrunroot = %q\n",
			cfg.path("crio", "root"), cfg.path("crio", "run")),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return err
		}
	}
	// The bed's helpers, from the source tree.
	registry, wrapper := cfg.path("crio", "registry"), cfg.path("crio", "crio-runc")
	for bin, pkg := range map[string]string{registry: "./test/testbed/cmd/registry", wrapper: "./test/testbed/cmd/crio-runc"} {
		build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, pkg)
		build.Dir = cfg.RepoDir
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return &ComponentError{Component: "crio", Err: fmt.Errorf("go build %s: %w\n%s", pkg, err, out)}
		}
	}
	if err := os.WriteFile(cfg.crioRunc(), []byte(fmt.Sprintf("#!/bin/sh\nexec %s %s \"$@\"\n", wrapper, filepath.Join(bins.runc, "runc"))), 0o755); err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(cfg.RegistryPort)
	if err := b.run(ctx, "registry", 10*time.Second, httpReady("http://"+addr+"/v2/"),
		registry, "-dir", cfg.registryDir(), "-listen", addr); err != nil {
		return err
	}
	if err := b.runWith(ctx, "crio", 60*time.Second, b.crioReady, crioEnv(cfg),
		filepath.Join(bins.crio, "crio"), "--config", cfg.path("crio", "crio.conf"),
		"--config-dir", cfg.path("crio", "conf.d"), "--log-level", "info",
		// Hidden flags of CRI-O's: its registries.conf, not the host's.
		"--registries-conf", cfg.path("crio", "registries.conf"), "--registries-conf-dir", cfg.path("crio", "conf.d")); err != nil {
		return err
	}
	for _, a := range archives {
		if err := b.ImportImage(ctx, a); err != nil {
			return &ComponentError{Component: "crio", Log: cfg.LogFile("crio"), Err: err}
		}
	}
	return nil
}

// crioEnv points CRI-O's storage library at the bed's file, never the
// host's /etc/containers.
func crioEnv(cfg Config) []string {
	return []string{
		"CONTAINERS_STORAGE_CONF=" + cfg.path("crio", "storage.conf"),
		"PATH=" + filepath.Dir(crioConmon) + ":" + os.Getenv("PATH"),
	}
}

func (c Config) registryDir() string { return c.path("crio", "images") }

// crioRunc is the runc CRI-O runs: cmd/crio-runc before the bed's runc.
func (c Config) crioRunc() string { return c.path("crio", "runc") }

func (b *Bed) crioReady(ctx context.Context) error {
	_, err := b.criVersion(ctx)
	return err
}

// criConn dials the runtime's CRI socket.
func (b *Bed) criConn() (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+b.cfg.runtimeSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("the runtime's CRI socket %s: %w", b.cfg.runtimeSocket(), err)
	}
	return conn, nil
}

// criVersion is the runtime's name and version, as its CRI service says.
func (b *Bed) criVersion(ctx context.Context) (*runtimeapi.VersionResponse, error) {
	conn, err := b.criConn()
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	return runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
}

// RuntimeVersion is the node's runtime and its version
// ("cri-o 1.34.0", "containerd v2.2.9").
func (b *Bed) RuntimeVersion(ctx context.Context) (string, error) {
	v, err := b.criVersion(ctx)
	if err != nil {
		return "", err
	}
	return v.RuntimeName + " " + v.RuntimeVersion, nil
}

// pullImages has the runtime pull images, as the kubelet would: a CRI-O
// node's way of taking in what the registry was given.
func (b *Bed) pullImages(ctx context.Context, names []string) error {
	conn, err := b.criConn()
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	images := runtimeapi.NewImageServiceClient(conn)
	for _, name := range names {
		if _, err := images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: name}}); err != nil {
			return fmt.Errorf("pull image %s: %w", name, err)
		}
	}
	return nil
}
