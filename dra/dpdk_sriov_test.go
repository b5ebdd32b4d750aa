//go:build sriov

package dra

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// TestSRIOVDPDKTestpmd: DPDK runs on a VF fastpath prepared in mode vfio,
// with nothing but what the claim's CDI spec gives a container: a
// "container" in new mount and network namespaces whose /dev holds only
// the spec's device nodes (and the runtime's null, zero, urandom) and
// hugetlbfs, whose environment is only the spec's, runs dpdk-testpmd on
// the device PCIDEVICE_FASTPATH_DEV_DPDK names. The kernel's PF sends
// frames to the VF's MAC; testpmd swaps their MACs and sends them back:
// both testpmd and the PF count at least 1,000. Unprepare gives the VF
// back to igbvf with its settings.
func TestSRIOVDPDKTestpmd(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	vf := pf.VFsReady(t, 4)[2]
	sriovtest.Modprobe(t, "vfio-pci")
	if _, err := exec.LookPath("dpdk-testpmd"); err != nil {
		t.Fatalf("dpdk-testpmd (Debian's dpdk-dev, which test/deps.sh testbed installs on the host the VM mounts): %v", err)
	}
	// The VF's MAC, as an operator sets it through the PF: DPDK's igbvf
	// takes the PF's.
	const vfMAC = "02:fa:57:00:00:21"
	if out, err := exec.Command("ip", "link", "set", pf.Name, "vf", strconv.Itoa(vf.ID), "mac", vfMAC).CombinedOutput(); err != nil {
		t.Fatalf("set VF %d's MAC: %v: %s", vf.ID, err, out)
	}
	t.Cleanup(func() { pf.ResetVF(t, vf) })
	was := readVF(t, pf.Name, vf.ID)
	reserveHugepages(t, 128)

	claim := testClaim("testpmd", []alloc{{Request: "dpdk", Device: devices.PCIDeviceName(vf.Address)}}, fromClaim(config(`"mode": "vfio", "vf": {"spoofChk": false}`)))
	d, k, ctx := startSRIOVDriver(t, &fakeObject{claim})
	if e := prepare(t, ctx, k, claim); e != "" {
		t.Fatalf("prepare: %s", e)
	}
	t.Cleanup(func() {
		if sriovtest.Driver(vf.Address) != "igbvf" {
			sriovtest.Rebind(t, vf.Address, "igbvf")
		}
	})
	spec, err := cdi.ReadSpec(cdiSpecPath(d.opts.CDIDir, claim.UID), 0)
	if err != nil {
		t.Fatal(err)
	}
	dev := spec.GetDevice(cdiDeviceName(claim.UID, "dpdk"))
	if dev == nil {
		t.Fatalf("the CDI spec has no device %s", cdiDeviceName(claim.UID, "dpdk"))
	}

	// The container: its /dev from the spec's device nodes, its
	// environment the spec's, hugetlbfs.
	cmd := sriovtest.Container{Device: dev, Hugepages: true}.Command(context.Background(),
		`exec dpdk-testpmd -l 0,1 -m 128 --file-prefix fpctr -a "$PCIDEVICE_FASTPATH_DEV_DPDK" `+
			"-- --forward-mode=macswap --auto-start --nb-cores=1 --total-num-mbufs=4096 --rxd=256 --txd=256 --stats-period=2")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		done := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	t.Cleanup(stop)
	sriovtest.WaitFor(t, 60*time.Second, "testpmd forwarding on the VF", func() bool {
		return strings.Contains(out.String(), "Port statistics")
	})
	t.Logf("testpmd started: %s", firstLines(out.String(), "EAL: Probe PCI driver", "Port 0:"))

	// The PF sends; testpmd swaps and sends back.
	rxBefore := pfRX(t, pf.Name)
	sendFrames(t, pf.Name, vfMAC, 3000)
	const least = 1000
	var rx, tx int
	sriovtest.WaitFor(t, 60*time.Second, "testpmd to count 1,000 packets each way", func() bool {
		rx, tx = testpmdCounters(out.String())
		return rx >= least && tx >= least
	})
	got := pfRX(t, pf.Name) - rxBefore
	stop()
	if got < least {
		t.Errorf("the PF received %d packets back, want at least %d", got, least)
	}
	t.Logf("through VF %s on vfio-pci, with only its CDI spec: testpmd received %d and sent %d packets; the PF received %d back", vf.Address, rx, tx, got)

	unprepare(t, ctx, k, claim)
	if drv := sriovtest.Driver(vf.Address); drv != "igbvf" {
		t.Fatalf("after Unprepare VF %s is on %q, want igbvf", vf.Address, drv)
	}
	sriovtest.WaitFor(t, 10*time.Second, "the netdev of VF "+vf.Address+" on igbvf", func() bool { return sriovtest.Netdev(vf.Address) != "" })
	if now := readVF(t, pf.Name, vf.ID); now != was {
		t.Errorf("after Unprepare the kernel reports VF %d as %+v, want %+v as before", vf.ID, now, was)
	}
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// reserveHugepages has the node hold n 2 MiB hugepages while the test runs.
func reserveHugepages(t *testing.T, n int) {
	t.Helper()
	const path = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(n)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.WriteFile(path, before, 0o644) })
}

func pfRX(t *testing.T, pf string) int {
	t.Helper()
	l, err := netlink.LinkByName(pf)
	if err != nil {
		t.Fatal(err)
	}
	return int(l.Attrs().Statistics.RxPackets)
}

// sendFrames sends n Ethernet frames from the PF to dst, of the local
// experimental EtherType, in bursts the emulated NIC keeps up with.
func sendFrames(t *testing.T, pf, dst string, n int) {
	t.Helper()
	l, err := netlink.LinkByName(pf)
	if err != nil {
		t.Fatal(err)
	}
	to, err := net.ParseMAC(dst)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(fd) }()
	addr := &unix.SockaddrLinklayer{Ifindex: l.Attrs().Index, Halen: 6}
	copy(addr.Addr[:], to)
	frame := make([]byte, 64)
	copy(frame[0:6], to)
	copy(frame[6:12], l.Attrs().HardwareAddr)
	binary.BigEndian.PutUint16(frame[12:14], 0x88b5)
	// A burst of 32 every 2 ms, as a traffic generator paces.
	pace := time.NewTicker(2 * time.Millisecond)
	defer pace.Stop()
	for i := range n {
		binary.BigEndian.PutUint32(frame[14:18], uint32(i))
		if err := unix.Sendto(fd, frame, 0, addr); err != nil {
			t.Fatalf("send frame %d: %v", i, err)
		}
		if i%32 == 31 {
			<-pace.C
		}
	}
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

// firstLines are the lines of out that contain one of want.
func firstLines(out string, want ...string) string {
	var keep []string
	for line := range strings.Lines(out) {
		for _, w := range want {
			if strings.Contains(line, w) {
				keep = append(keep, strings.TrimSpace(line))
			}
		}
	}
	return strings.Join(keep, "; ")
}
