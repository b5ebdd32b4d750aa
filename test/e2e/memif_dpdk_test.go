//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// TestMemifDPDK: DPDK's net_memif on both ends of a memif fastpath hands
// over. On the node, dpdk-testpmd is the memif server (a vswitch's part)
// with its socket in --memif-dir; the pod's dpdk-testpmd (the dpdk image)
// is its client through nothing but what the claim's CDI spec gave the
// container (the socket mounted, MEMIF_SOCKET_VS). Both forward what they
// receive back, the pod sending a first burst: each end counts at least
// 1,000 packets received and sent.
func TestMemifDPDK(t *testing.T) {
	ctx := testContext(t)
	root, memifDir := sysfsfixture.TempDir(t), sysfsfixture.TempDir(t)
	if err := sysfsfixture.Plain().Write(root); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(memifDir, "testpmd.sock")
	vswitch := startTestpmdServer(t, ctx, socket)
	t.Cleanup(func() { deleteSlices(t) })
	applyDeviceClasses(t, ctx, "deviceclasses.yaml")
	startDaemon(t, ctx, 26285, "--sysfs-root", root, "--memif-dir", memifDir)

	tmpl := claimTemplate(t, ctx, "e2e-memif-dpdk", "vs", "memif.fastpath.dev", `device.attributes["fastpath.dev"].memifRole == "slave"`,
		&v1alpha1.InterfaceConfig{Memif: &v1alpha1.MemifSpec{UID: new(int64(0)), GID: new(int64(0))}})
	pod := templatePod("e2e-memif-dpdk", "dpdk-memif", tmpl)
	pod.Spec.Containers[0].Image = testbed.DPDKImage
	if _, err := bed.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })

	const least = 1000
	// Both ends print their counters every second, the node's through a
	// pipe that holds them until its buffer fills: each is polled.
	var podRX, podTX, swRX, swTX int
	var logs string
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		logs, _ = bed.PodLogs(ctx, "default", pod.Name)
		podRX, podTX = testpmdCounters(logs)
		swRX, swTX = testpmdCounters(vswitch.output())
		return podRX >= least && podTX >= least && swRX >= least && swTX >= least, nil
	})
	if err != nil {
		t.Fatalf("the pod's testpmd counted RX %d, TX %d, the node's RX %d, TX %d, want %d each:\npod:\n%s\nnode:\n%s",
			podRX, podTX, swRX, swTX, least, tail(logs, 40), tail(vswitch.output(), 40))
	}
	t.Logf("through %s: the pod's testpmd received %d and sent %d packets, the node's received %d and sent %d", socket, podRX, podTX, swRX, swTX)
	if strings.Contains(logs, "socket="+socket) {
		t.Errorf("the pod was given the node's path of the socket")
	}
	if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
		t.Fatal(err)
	}
	if err := podGone(ctx, pod, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// testpmdServer is dpdk-testpmd serving a memif socket on the node.
type testpmdServer struct {
	mu  sync.Mutex
	out bytes.Buffer
}

func (s *testpmdServer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.Write(p)
}

func (s *testpmdServer) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// startTestpmdServer runs dpdk-testpmd as the memif server of socket,
// forwarding what it receives back, until the test ends.
func startTestpmdServer(t *testing.T, ctx context.Context, socket string) *testpmdServer {
	t.Helper()
	s := &testpmdServer{}
	cmd := exec.Command("dpdk-testpmd", "--no-huge", "-m", "256", "--no-pci", "-l", "0,1",
		"--file-prefix", fmt.Sprintf("fpe2e%d", os.Getpid()),
		"--vdev=net_memif0,role=server,socket-abstract=no,socket="+socket,
		"--", "--forward-mode=io", "--auto-start", "--nb-cores=1", "--total-num-mbufs=8192", "--rxd=256", "--txd=256", "--stats-period=1")
	cmd.Stdout, cmd.Stderr = s, s
	if err := cmd.Start(); err != nil {
		t.Fatalf("dpdk-testpmd (Debian's dpdk-dev; test/deps.sh testbed installs it): %v", err)
	}
	t.Cleanup(func() {
		// SIGINT: testpmd stops its ports and exits; it gets 10 s.
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = os.RemoveAll(filepath.Join("/var/run/dpdk", fmt.Sprintf("fpe2e%d", os.Getpid())))
	})
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		fi, err := os.Stat(socket)
		return err == nil && fi.Mode()&os.ModeSocket != 0, nil
	}); err != nil {
		t.Fatalf("dpdk-testpmd never listened on %s:\n%s", socket, tail(s.output(), 40))
	}
	return s
}

// testpmdCounters are the highest RX-packets and TX-packets testpmd's
// port statistics printed.
func testpmdCounters(out string) (rx, tx int) {
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		for i := 0; i+1 < len(fields); i++ {
			n, err := strconv.Atoi(fields[i+1])
			if err != nil {
				continue
			}
			switch fields[i] {
			case "RX-packets:":
				rx = max(rx, n)
			case "TX-packets:":
				tx = max(tx, n)
			}
		}
	}
	return rx, tx
}
