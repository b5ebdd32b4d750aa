package testbed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/fastpath-dra/fastpath/test/images"
)

// Images the bed provides; pods must use imagePullPolicy Never.
const (
	PauseImage    = "fastpath.local/pause:dev"
	WorkloadImage = "fastpath.local/workload:dev"
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
	var archives []string
	for _, img := range []images.Image{
		{Tags: []string{PauseImage}, Entrypoint: []string{"/pause"}, Files: files},
		{Tags: []string{WorkloadImage}, Entrypoint: []string{"/workload"}, Files: files},
	} {
		path := filepath.Join(dir, filepath.Base(img.Entrypoint[0])+".tar")
		if err := images.WriteArchive(path, img); err != nil {
			return nil, fmt.Errorf("write image %s: %w", img.Tags[0], err)
		}
		archives = append(archives, path)
	}
	return archives, nil
}
