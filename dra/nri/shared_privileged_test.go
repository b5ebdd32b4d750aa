//go:build privileged

package nri

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

func newSharedNetNS(t *testing.T) string {
	t.Helper()
	return netnstest.New(t, fmt.Sprintf("%s-%d-%d", sharedPrefix, os.Getpid(), seq.Add(1)))
}

// newSharedParent is an up veth (its peer up) standing in for a shared NIC.
func newSharedParent(t *testing.T) netlink.Link {
	t.Helper()
	// Unique on the machine: another run of these tests may be going on.
	id := fmt.Sprintf("%s%d-%d", sharedPrefix, os.Getpid()%100000, seq.Add(1))
	name, peer := id+"a", id+"b"
	netnstest.Veth(t, name, peer)
	for _, n := range []string{peer, name} {
		l, err := netlink.LinkByName(n)
		if err == nil {
			err = netlink.LinkSetUp(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// sharedClaim is a prepared claim of pod with a macvlan of parent.
func sharedClaim(name string, pod types.UID, parent netlink.Link, address string) claims.Claim {
	return claims.Claim{Driver: claims.DriverFastpath, UID: types.UID("uid-" + name), Namespace: "default", Name: name,
		Pod: claims.Pod{UID: pod, Name: "pod-" + string(pod)},
		Devices: []claims.Device{{Request: "fast", Pool: "node-a", Device: "netdev-" + parent.Attrs().Name, Kind: "netdev", Mode: "macvlan",
			Shared: &claims.SharedInterface{Parent: parent.Attrs().Name, Kind: "macvlan", Mode: "bridge", ShareID: "share-" + name},
			Pod:    &claims.PodInterface{Name: "fast0", MTU: 1400, Addresses: []string{address}},
			IPAM:   &claims.IPAMLease{Pool: "fast", Address: address}}}}
}

// Two pods share one parent: RunPodSandbox makes each pod's macvlan in its
// namespace, with address and up, and its status names the share; the
// pods reach each other; CreateContainer finds them in place; Stop deletes
// one, Synchronize without the other forgets it (its namespace took the
// interface); the parent is as it was.
func TestSharedRunStop(t *testing.T) {
	parent := newSharedParent(t)
	before := parent.Attrs()
	podA, podB := newSharedNetNS(t), newSharedNetNS(t)
	a := sharedClaim("a", "pod-a", parent, "10.77.0.2/24")
	b := sharedClaim("b", "pod-b", parent, "10.77.0.3/24")
	bed, ctx := newTestBed(t, a, b)

	for _, p := range []struct {
		c  claims.Claim
		ns string
	}{{a, podA}, {b, podB}} {
		if err := bed.hooks.RunPodSandbox(ctx, sandbox(p.c.Pod.UID, p.ns)); err != nil {
			t.Fatal(err)
		}
		l := podLink(t, p.ns, "fast0")
		if mv, ok := l.(*netlink.Macvlan); !ok || mv.Mode != netlink.MACVLAN_MODE_BRIDGE || l.Attrs().MTU != 1400 || l.Attrs().Flags&net.FlagUp == 0 ||
			l.Attrs().Alias != "fastpath/"+string(p.c.UID)+"/fast" {
			t.Errorf("%s: fast0 = %T %+v", p.c.Name, l, l)
		}
		st := bed.condition(t, ctx, p.c, metav1.ConditionTrue)
		if st.ShareID == nil || *st.ShareID != "share-"+p.c.Name || st.NetworkData == nil || st.NetworkData.IPs[0] != p.c.Devices[0].Pod.Addresses[0] {
			t.Errorf("%s: status = %+v", p.c.Name, st)
		}
		if rec, _ := bed.store.Get(p.c.Key()); rec.Devices[0].Attached == nil || rec.Devices[0].Attached.NetNS != p.ns {
			t.Errorf("%s: attachment recorded as %+v", p.c.Name, rec.Devices[0].Attached)
		}
		if _, _, err := bed.hooks.CreateContainer(ctx, sandbox(p.c.Pod.UID, p.ns), &api.Container{}); err != nil {
			t.Errorf("%s: CreateContainer: %v", p.c.Name, err)
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", filepath.Base(podA), "ping", "-c", "1", "-W", "2", "10.77.0.3").CombinedOutput(); err != nil {
		t.Errorf("pod a cannot reach pod b through the shared parent: %v\n%s", err, out)
	}

	if err := bed.hooks.StopPodSandbox(ctx, sandbox("pod-a", podA)); err != nil {
		t.Fatal(err)
	}
	if l := podLink(t, podA, "fast0"); l != nil {
		t.Errorf("fast0 still in pod a after Stop")
	}
	if rec, _ := bed.store.Get(a.Key()); rec.Devices[0].Attached != nil {
		t.Errorf("a: attachment still recorded: %+v", rec.Devices[0].Attached)
	}
	if err := netns.DeleteNamed(filepath.Base(podB)); err != nil {
		t.Fatal(err)
	}
	if _, err := bed.hooks.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if rec, _ := bed.store.Get(b.Key()); rec.Devices[0].Attached != nil {
		t.Errorf("b: attachment still recorded after Synchronize without its pod: %+v", rec.Devices[0].Attached)
	}
	after, err := netlink.LinkByName(parent.Attrs().Name)
	if err != nil {
		t.Fatal(err)
	}
	if a := after.Attrs(); a.Index != before.Index || a.MTU != before.MTU || a.HardwareAddr.String() != before.HardwareAddr.String() ||
		a.Flags&net.FlagUp == 0 || a.Alias != before.Alias {
		t.Errorf("parent changed: %+v, was %+v", a, before)
	}
}

// A failed attach (a route the kernel refuses) leaves nothing in the pod,
// fails the sandbox naming claim and device, and records no attachment.
func TestSharedAttachFails(t *testing.T) {
	parent := newSharedParent(t)
	pod := newSharedNetNS(t)
	c := sharedClaim("bad", "pod-bad", parent, "10.77.0.2/24")
	c.Devices[0].Pod.Routes = []claims.Route{{Destination: "10.78.0.0/16", Gateway: "10.99.0.1"}}
	bed, ctx := newTestBed(t, c)
	err := bed.hooks.RunPodSandbox(ctx, sandbox("pod-bad", pod))
	if err == nil {
		t.Fatal("RunPodSandbox succeeded with a route the kernel refuses")
	}
	if want := `claim default/bad, request "fast", device netdev-` + parent.Attrs().Name; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %q", err, want)
	}
	if l := podLink(t, pod, "fast0"); l != nil {
		t.Error("a failed attach left fast0 in the pod")
	}
	if rec, _ := bed.store.Get(c.Key()); rec.Devices[0].Attached != nil {
		t.Errorf("attachment still recorded: %+v", rec.Devices[0].Attached)
	}
	bed.condition(t, ctx, c, metav1.ConditionFalse)
}
