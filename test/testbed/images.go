package testbed

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fastpath-dra/fastpath/test/images"
)

// Images the bed provides; pods must use imagePullPolicy Never.
const (
	PauseImage    = "fastpath.local/pause:dev"
	WorkloadImage = "fastpath.local/workload:dev"
	// DPDKImage is the workload with DPDK's dpdk-testpmd, its libraries
	// and the memif PMD, from the node's Debian package dpdk-dev
	// (test/deps.sh testbed installs it): workload dpdk-memif runs it.
	DPDKImage = "fastpath.local/dpdk:dev"
)

// buildImages builds the workload binary from the source tree and writes the
// pause and workload image archives into dir.
func buildImages(ctx context.Context, cfg Config, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "workload")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./test/images/workload")
	cmd.Dir = cfg.RepoDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./test/images/workload: %w\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	files := []images.File{{Path: "workload", Data: data, Mode: 0o755}, {Path: "pause", Data: data, Mode: 0o755}}
	dpdk, err := dpdkFiles(ctx)
	if err != nil {
		return nil, err
	}
	var archives []string
	for _, img := range []images.Image{
		{Tags: []string{PauseImage}, Entrypoint: []string{"/pause"}, Files: files},
		{Tags: []string{WorkloadImage}, Entrypoint: []string{"/workload"}, Files: files},
		{Tags: []string{DPDKImage}, Entrypoint: []string{"/workload"}, Files: append(slices.Clone(files), dpdk...)},
	} {
		path := filepath.Join(dir, strings.NewReplacer("fastpath.local/", "", ":dev", "").Replace(img.Tags[0])+".tar")
		write := func() error { return images.WriteArchive(path, img) }
		if cfg.Runtime == RuntimeCRIO {
			// The bed's registry serves OCI archives (CRI-O pulls).
			write = func() error { _, err := images.WriteOCIArchive(path, img); return err }
		}
		if err := write(); err != nil {
			return nil, fmt.Errorf("write image %s: %w", img.Tags[0], err)
		}
		archives = append(archives, path)
	}
	return archives, nil
}

// The node's dpdk-testpmd and the PMDs the memif workload loads (the
// package's, under their names without the ABI version: EAL loads only
// *.so from a directory).
const (
	testpmdPath = "/usr/bin/dpdk-testpmd"
	pmdSource   = "/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0"
	pmdDir      = "usr/lib/dpdk-pmds"
)

var pmds = []string{"librte_net_memif.so.23", "librte_mempool_ring.so.23"}

// dpdkFiles are dpdk-testpmd, the memif PMDs and every shared library they
// load, as ldd finds them on the node: the image holds nothing else of
// Debian's.
func dpdkFiles(ctx context.Context) ([]images.File, error) {
	if _, err := os.Stat(testpmdPath); err != nil {
		return nil, fmt.Errorf("the dpdk image needs %s (Debian's dpdk-dev; test/deps.sh testbed installs it): %w", testpmdPath, err)
	}
	objects := []string{testpmdPath}
	for _, p := range pmds {
		objects = append(objects, filepath.Join(pmdSource, p))
	}
	paths := map[string]bool{}
	for _, o := range objects {
		out, err := exec.CommandContext(ctx, "ldd", o).Output()
		if err != nil {
			return nil, fmt.Errorf("ldd %s: %w", o, err)
		}
		for line := range strings.Lines(string(out)) {
			fields := strings.Fields(line)
			switch {
			case len(fields) >= 3 && fields[1] == "=>" && strings.HasPrefix(fields[2], "/"):
				paths[fields[2]] = true
			case len(fields) >= 1 && strings.HasPrefix(fields[0], "/"):
				paths[fields[0]] = true // the dynamic loader
			}
		}
	}
	files := []images.File{{Path: "tmp", Dir: true, Mode: 0o1777}, {Path: "var/run", Dir: true, Mode: 0o755}, {Path: pmdDir, Dir: true, Mode: 0o755}}
	add := func(path, from string, mode int64) error {
		data, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		files = append(files, images.File{Path: strings.TrimPrefix(path, "/"), Data: data, Mode: mode})
		return nil
	}
	if err := add(testpmdPath, testpmdPath, 0o755); err != nil {
		return nil, err
	}
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		if err := add(p, p, 0o755); err != nil {
			return nil, err
		}
	}
	for _, p := range pmds {
		if err := add(filepath.Join(pmdDir, strings.TrimSuffix(p, ".23")), filepath.Join(pmdSource, p), 0o644); err != nil {
			return nil, err
		}
	}
	return files, nil
}
