//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// fastpathdBinary builds cmd/fastpathd once per test run.
func fastpathdBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "fastpath-e2e-bin-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, "fastpathd"), "./cmd/fastpathd")
		cmd.Dir = bed.Config().RepoDir
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/fastpathd: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "fastpathd")
}

// daemon is a fastpathd process running beside the bed's node.
type daemon struct {
	name       string
	stateDir   string
	healthAddr string
	extra      []string
}

// startDaemon runs fastpathd with the bed's kubelet, NRI and CDI paths and
// the extra args, and waits until the kubelet has registered it.
func startDaemon(t *testing.T, ctx context.Context, port int, extra ...string) *daemon {
	t.Helper()
	d := &daemon{name: "fastpathd-" + t.Name(), stateDir: t.TempDir(), healthAddr: fmt.Sprintf("127.0.0.1:%d", port), extra: extra}
	d.start(t, ctx)
	t.Cleanup(func() {
		if err := bed.StopProcess(d.name); err != nil {
			t.Errorf("stop %s: %v", d.name, err)
		}
	})
	return d
}

// restart stops the daemon and starts it again with the same state.
func (d *daemon) restart(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := bed.StopProcess(d.name); err != nil {
		t.Fatal(err)
	}
	d.start(t, ctx)
}

func (d *daemon) start(t *testing.T, ctx context.Context) {
	t.Helper()
	args := append([]string{fastpathdBinary(t), "run",
		"--node-name", bed.NodeName(), "--kubeconfig", bed.Kubeconfig(),
		"--plugin-dir", bed.PluginDir("fastpath.dev"), "--registry-dir", bed.RegistryDir(),
		"--nri-socket", bed.NRISocket(), "--cdi-dir", bed.CDIDir(), "--state-dir", d.stateDir,
		"--metrics-addr", d.healthAddr, "-v", "2"}, d.extra...)
	if err := bed.StartProcess(ctx, d.name, args...); err != nil {
		t.Fatal(err)
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.healthAddr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("fastpathd never registered with the kubelet (last /readyz: %s); log: %s", last, bed.Config().LogFile(d.name))
	}
}

func (d *daemon) checkpoint() string { return filepath.Join(d.stateDir, "checkpoint.json") }
