package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fastpath-dra/fastpath/dra/status"
)

// memifTurns is how many turns each side of benchMemif takes, and
// memifSamples how many of the receiver's per-second rates a turn keeps.
const (
	memifTurns   = 2
	memifSamples = 2
)

// benchMemif is BenchmarkDatapath's memif pair: DPDK's testpmd on both
// ends of a memif, the node's end serving the socket and sending
// (txonly), the pod's end connecting and receiving (rxonly), each end's
// forwarding core on a CPU of its own. fastpath's side: the pod's testpmd
// connects through the path a memif claim's CDI spec gives the container
// (the endpoint's socket bind-mounted at /run/fastpath/memif/<request>/
// memif.sock, in a mount namespace of its own under a root standing in
// for the container's). By hand: it connects to the socket's own path.
// The sides take turns, a new pair of processes each turn; a turn keeps
// the receiver's rate of memifSamples seconds once packets flow. b.N is
// not used: the figures are rates.
func benchMemif(b *testing.B) {
	if _, err := exec.LookPath("dpdk-testpmd"); err != nil {
		b.Fatalf("dpdk-testpmd (Debian's dpdk-dev; test/deps.sh testbed installs it): %v", err)
	}
	dir := b.TempDir()
	socket := filepath.Join(dir, "vs.sock")
	root := filepath.Join(dir, "pod")
	inPod := filepath.Join(root, status.MemifContainerSocket("vs"))
	var rates [2][]float64 // fastpath's, by hand
	for turn := range memifTurns {
		for _, side := range []int{turn % 2, 1 - turn%2} {
			r, err := memifTurn(b, socket, root, inPod, side == 0)
			if err != nil {
				// On a loaded machine (make test runs the benchmarks
				// beside the e2e suite) a pair sometimes never brings
				// its memif up within the wait: a new pair, once.
				b.Logf("turn %d, again with a new pair: %v", turn, err)
				r, err = memifTurn(b, socket, root, inPod, side == 0)
			}
			if err != nil {
				b.Fatal(err)
			}
			rates[side] = append(rates[side], r...)
		}
	}
	fast, hand := medianOf(rates[0]), medianOf(rates[1])
	b.ReportMetric(1e9/fast, "ns/op")
	b.ReportMetric(fast, "pkt/s")
	b.ReportMetric(1e9/hand, "hand-ns/pkt")
	b.ReportMetric(hand, "hand-pkt/s")
	b.ReportMetric(fast/hand, "x-hand")
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// memifTurn runs one pair and returns the receiver's rates, once packets
// flow: through the bind mount at inPod under root (fastpath's side), or
// at socket.
func memifTurn(b *testing.B, socket, root, inPod string, mounted bool) ([]float64, error) {
	_ = os.Remove(socket)
	prefix := fmt.Sprintf("%sm%d", benchPrefix, os.Getpid())
	server := startTestpmd(b, prefix+"s", "0,1", "0", "server", socket, "txonly", nil)
	defer server.stop()
	if err := pollUntil(30*time.Second, func() bool {
		fi, err := os.Stat(socket)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	}); err != nil {
		return nil, fmt.Errorf("the node's testpmd never served %s: %w\n%s", socket, err, server.output())
	}
	path, wrap := socket, []string(nil)
	if mounted {
		// The CDI spec's mount: the endpoint's socket, bound at the
		// container's path, seen by the pod's process alone.
		if err := os.MkdirAll(filepath.Dir(inPod), 0o750); err != nil {
			return nil, err
		}
		if err := os.WriteFile(inPod, nil, 0o600); err != nil {
			return nil, err
		}
		path = inPod
		wrap = []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
			`mount --bind "$0" "$1" && shift && exec "$@"`, socket, inPod}
	}
	client := startTestpmd(b, prefix+"c", "0,1", "1", "client", path, "rxonly", wrap)
	defer client.stop()
	var rates []float64
	err := pollUntil(30*time.Second, func() bool {
		rates = flowing(client.output())
		return len(rates) >= memifSamples
	})
	if err != nil {
		return nil, fmt.Errorf("the pod's testpmd received %v through %s: %w\nnode:\n%s\npod:\n%s", rates, path, err, server.output(), client.output())
	}
	return rates[:memifSamples], nil
}

var rxPPS = regexp.MustCompile(`Rx-pps:\s+(\d+)`)

// flowing is the receive rates testpmd printed once the first nonzero one
// came, the first (a part of a second) left out.
func flowing(out string) []float64 {
	var rates []float64
	for _, m := range rxPPS.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		if v > 0 || len(rates) > 0 {
			rates = append(rates, v)
		}
	}
	if len(rates) < 2 {
		return nil
	}
	return rates[1:]
}

// testpmd is a dpdk-testpmd process and its output.
type testpmd struct {
	cmd    *exec.Cmd
	prefix string
	mu     sync.Mutex
	out    bytes.Buffer
	done   chan struct{}
}

func (t *testpmd) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out.Write(p)
}

func (t *testpmd) output() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out.String()
}

// startTestpmd runs dpdk-testpmd with one memif port (role, at socket) in
// forwarding mode mode, on lcores, its main lcore main (the other one
// forwards), without hugepages; wrap, if any, runs it.
func startTestpmd(b *testing.B, prefix, lcores, main, role, socket, mode string, wrap []string) *testpmd {
	b.Helper()
	args := []string{"dpdk-testpmd", "--no-huge", "-m", "256", "--no-pci", "-l", lcores, "--main-lcore", main, "--file-prefix", prefix,
		"--vdev=net_memif0,role=" + role + ",socket-abstract=no,socket=" + socket,
		"--", "--forward-mode=" + mode, "--auto-start", "--nb-cores=1", "--total-num-mbufs=8192", "--rxd=256", "--txd=256", "--stats-period=1"}
	args = append(wrap, args...)
	t := &testpmd{prefix: prefix, done: make(chan struct{})}
	t.cmd = exec.Command(args[0], args[1:]...)
	t.cmd.Stdout, t.cmd.Stderr = t, t
	t.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := t.cmd.Start(); err != nil {
		b.Fatalf("%s: %v", args[0], err)
	}
	go func() {
		_ = t.cmd.Wait()
		close(t.done)
	}()
	return t
}

// stop ends testpmd: SIGINT (it stops its ports), SIGKILL after 10 s; and
// removes its run-time directory.
func (t *testpmd) stop() {
	_ = t.cmd.Process.Signal(syscall.SIGINT)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-t.done:
	case <-ctx.Done():
		_ = t.cmd.Process.Kill()
		<-t.done
	}
	_ = os.RemoveAll(filepath.Join("/var/run/dpdk", t.prefix))
}
