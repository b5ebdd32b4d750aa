//go:build sriov

package dataplane

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/test/sriovtest"
)

// TestSRIOVKernelSharing: what sharing a PF among pods will build on is in
// the VM's kernel. An ipvlan on the PF is created straight in a pod's
// namespace (one request, no move), and soft-RoCE (rdma_rxe) on the PF gives
// a verbs device node, and discovery names it on the PF's device.
func TestSRIOVKernelSharing(t *testing.T) {
	pf := sriovtest.RequirePF(t)
	parent := linkByName(t, pf.Name)

	t.Run("ipvlan on the PF in a pod", func(t *testing.T) {
		podNS := sriovNetNS(t)
		ns, err := netns.GetFromPath(podNS)
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		name := sriovtest.Prefix + "ipv0"
		ipv := &netlink.IPVlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: parent.Attrs().Index, Namespace: netlink.NsFd(ns)},
			Mode: netlink.IPVLAN_MODE_L2}
		if err := netlink.LinkAdd(ipv); err != nil {
			t.Fatalf("add ipvlan on %s in the pod: %v", pf.Name, err)
		}
		if _, err := netlink.LinkByName(name); err == nil {
			t.Errorf("%s was made in the host", name)
		}
		l, _ := vfInPod(t, podNS, name)
		if l == nil {
			t.Fatalf("no %s in the pod", name)
		}
		if got, ok := l.(*netlink.IPVlan); !ok || got.Mode != netlink.IPVLAN_MODE_L2 {
			t.Errorf("%s in the pod is %s %+v, want an ipvlan in L2 mode", name, l.Type(), l)
		}
	})

	t.Run("rdma_rxe on the PF", func(t *testing.T) {
		// ib_uverbs gives the verbs device node: rdma-core's udev rules
		// load it on a node; 7.x's rdma_rxe no longer pulls it in.
		sriovtest.Modprobe(t, "rdma_rxe", "ib_uverbs")
		name := sriovtest.Prefix + "rxe0"
		if out, err := exec.Command("rdma", "link", "add", name, "type", "rxe", "netdev", pf.Name).CombinedOutput(); err != nil {
			t.Fatalf("rdma link add %s: %v: %s", name, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("rdma", "link", "delete", name).Run() })
		state, err := os.ReadFile(filepath.Join("/sys/class/infiniband", name, "ports", "1", "state"))
		if err != nil || !strings.Contains(string(state), "ACTIVE") {
			t.Errorf("%s port 1 state %q, %v", name, state, err)
		}
		if st, err := os.Stat("/dev/infiniband/uverbs0"); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("/dev/infiniband/uverbs0: %v", err)
		}
		// Discovery reports it on the PF's device.
		if dest, err := os.Readlink(filepath.Join("/sys/class/infiniband", name)); err == nil {
			t.Logf("/sys/class/infiniband/%s -> %s", name, dest)
		}
		disc, err := devices.New(devices.Options{})
		if err != nil {
			t.Fatal(err)
		}
		inv, err := disc.Discover(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range inv.Devices {
			a := d.Attributes()["rdmaDevice"]
			switch {
			case d.PCI != nil && d.PCI.Address == pf.Address:
				if a.StringValue == nil || *a.StringValue != name {
					t.Errorf("the PF's device %s has rdmaDevice %v, want %s", d.Name, a.StringValue, name)
				}
			case a.StringValue != nil:
				t.Errorf("device %s has rdmaDevice %s, which is on the PF", d.Name, *a.StringValue)
			}
		}
	})
}
