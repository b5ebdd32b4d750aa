//go:build sriov

package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/fastpath-dra/fastpath/test/netnstest"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// BenchmarkSRIOVDatapath runs in the SR-IOV VM (make e2e-sriov): what a
// pod receives through a real VF (igbvf) that fastpath's hook moved into
// it as a netdev claim's, against another VF of the same PF moved by hand
// (netlink calls of the benchmark's own), each with a UDP socket in its
// pod, taking turns in the same run as BenchmarkDatapath's udp pair on
// veth. The frames come from the PF in the host, the kernel's live-frames
// generator (XDP_TX on the PF), through the NIC's switch to the VF whose
// MAC they carry; each side has a MAC of its own, and the VFs'
// interrupts go to one CPU. The VM emulates its CPUs and its NIC (TCG,
// QEMU's igb), so the rates are the emulator's: x-hand, the ratio of the
// two sides in the same run, is what to read, over many runs. No latency:
// under emulation a frame's one-way time is the emulator's scheduling (a
// p99 from a millisecond to seconds, run to run).
func BenchmarkSRIOVDatapath(b *testing.B) {
	pf := sriovtest.RequirePF(b)
	pfLink, err := netlink.LinkByName(pf.Name)
	if err != nil {
		b.Fatal(err)
	}
	if err := netlink.LinkSetUp(pfLink); err != nil {
		b.Fatal(err)
	}
	// igb transmits XDP frames (ndo_xdp_xmit) only while an XDP program
	// is attached to it: one that passes everything. Attaching it resets
	// the PF, and VFs made before are left resetting (a VF then refuses a
	// MAC: "cannot assign requested address"): the VFs are made again
	// after it.
	pass := newXDPProgram(b, "pf_pass", asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()})
	xl, err := link.AttachXDP(link.XDPOptions{Program: pass, Interface: pfLink.Attrs().Index, Flags: link.XDPDriverMode})
	if err != nil {
		b.Fatalf("XDP on the PF %s: %v", pf.Name, err)
	}
	b.Cleanup(func() { _ = xl.Close() })
	pf.SetNumVFs(b, 0)
	vfs := pf.VFsReady(b, 4)
	gen := genProgram(b)
	b.Run("udp", func(b *testing.B) {
		macs := []string{"02:00:00:be:0c:01", "02:00:00:be:0c:03"}
		var sides [2]*datapathSide
		for i := range sides {
			l, err := netlink.LinkByName(vfs[i].Netdev)
			if err != nil {
				b.Fatal(err)
			}
			podNS := netnstest.New(b, fmt.Sprintf("%s-%d-vf%d", benchPrefix, os.Getpid(), i))
			var rx receiver
			if i == 0 {
				nd := benchNetdev(l)
				nd.MAC = macs[i]
				attachByFastpath(b, podNS, nd)
				rx = openUDP(b, podNS, nd.Name)
			} else {
				moveByHand(b, podNS, l)
				setMAC(b, podNS, l.Attrs().Name, macs[i])
				rx = openUDP(b, podNS, l.Attrs().Name)
			}
			// The VF's interrupts (requested once it is up) on one
			// CPU, the same for both: which CPU takes a VF's receive
			// work would otherwise differ from VF to VF, and the
			// consumer's with it.
			pinIRQs(b, vfs[i].Address, "0")
			mac, _ := net.ParseMAC(macs[i])
			g := newGenerator(b, gen, pf.Name)
			copy(g.opts.Data[0:6], mac)
			sides[i] = &datapathSide{rx: rx, gen: g}
		}
		b.ResetTimer()
		turns(b, sides)
		fast, hand := sides[0], sides[1]
		b.ReportMetric(fast.elapsed.Seconds()*1e9/float64(fast.got), "ns/op")
		b.ReportMetric(float64(fast.got)/fast.elapsed.Seconds(), "pkt/s")
		b.ReportMetric(float64(hand.got)/hand.elapsed.Seconds(), "hand-pkt/s")
		b.ReportMetric((float64(fast.got)/fast.elapsed.Seconds())/(float64(hand.got)/hand.elapsed.Seconds()), "x-hand")
	})
}

// setMAC gives the link name in podNS the address mac, by hand.
func setMAC(b *testing.B, podNS, name, mac string) {
	b.Helper()
	hw, err := net.ParseMAC(mac)
	if err != nil {
		b.Fatal(err)
	}
	netnstest.Do(b, podNS, func() {
		l, err := netlink.LinkByName(name)
		if err == nil {
			err = netlink.LinkSetHardwareAddr(l, hw)
		}
		if err != nil {
			b.Fatalf("MAC %s on %s: %v", mac, name, err)
		}
	})
}

// pinIRQs sets the CPU list of every MSI-X interrupt of PCI function addr.
func pinIRQs(b *testing.B, addr, cpus string) {
	b.Helper()
	irqs, err := os.ReadDir(filepath.Join("/sys/bus/pci/devices", addr, "msi_irqs"))
	if err != nil || len(irqs) == 0 {
		b.Fatalf("the interrupts of %s: %v", addr, err)
	}
	for _, irq := range irqs {
		path := filepath.Join("/proc/irq", irq.Name(), "smp_affinity_list")
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			continue // allocated, not requested
		}
		if err := os.WriteFile(path, []byte(cpus), 0); err != nil {
			b.Fatalf("pin interrupt %s of %s to CPU %s: %v", irq.Name(), addr, cpus, err)
		}
	}
}
