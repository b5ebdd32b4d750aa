//go:build e2e && benche2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// moveFloor is the least a netdev driver can cost a pod: a claim of the
// floor driver (startup_floor_test.go) and, in an NRI plugin of the test,
// the kernel's work for the device, written directly against netlink: a
// veth end moved into the pod's network namespace at RunPodSandbox, then
// named, given fastpath's claim's MTU and address and set up, as
// BenchmarkFloor/attach does. Like fastpath's attach, the move runs beside
// the runtime's work (RunPodSandbox returns at once) and the pod's first
// container is made once it ended (CreateContainer waits). No record, no
// CDI device, no status: against it, a fastpath claim shows what fastpath
// adds to what any driver that moves a netdev into a pod must cost.
type moveFloor struct {
	links chan string // the veth ends not moved yet

	mu     sync.Mutex
	moving map[string]*moveTimes // pod name → its move
	synced chan struct{}
}

// moveTimes is one pod's move: when it began and ended, and its error.
type moveTimes struct {
	began, ended time.Time
	err          error
	done         chan struct{}
}

// movePrefix names the veths moveFloor moves ("fpmv<n>", their host
// peers "fpmw<n>").
const movePrefix = "fpmv"

// startMoveFloor makes n veth pairs and connects the plugin to the bed's
// containerd; all of it goes with the test (a moved veth with its pod).
func startMoveFloor(t *testing.T, ctx context.Context, n int) *moveFloor {
	t.Helper()
	m := &moveFloor{links: make(chan string, n), moving: map[string]*moveTimes{}, synced: make(chan struct{})}
	for i := range n {
		name := fmt.Sprintf("%s%d", movePrefix, i)
		netnstest.Veth(t, name, fmt.Sprintf("fpmw%d", i))
		m.links <- name
	}
	connectNRI(t, ctx, m, "e2e-move-floor", "95", m.synced)
	return m
}

// moveFloorPod says whether the pod is one of the move floor's.
func moveFloorPod(pod *api.PodSandbox) bool {
	return pod.GetNamespace() == "default" && (strings.HasPrefix(pod.GetName(), "startup-move-") || strings.HasPrefix(pod.GetName(), "startup-burst-move-"))
}

func (m *moveFloor) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	close(m.synced)
	return nil, nil
}

// RunPodSandbox begins the move and returns.
func (m *moveFloor) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	if !moveFloorPod(pod) {
		return nil
	}
	var path string
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" {
			path = ns.GetPath()
		}
	}
	name := pod.GetName()
	mt := &moveTimes{began: time.Now(), done: make(chan struct{})}
	m.mu.Lock()
	m.moving[name] = mt
	m.mu.Unlock()
	go func() {
		defer close(mt.done)
		select {
		case link := <-m.links:
			mt.err = moveInto(link, path)
			if mt.err != nil {
				mt.err = fmt.Errorf("pod %s: %w", name, mt.err)
			}
		default:
			mt.err = fmt.Errorf("no veth left to move")
		}
		mt.ended = time.Now()
		if mt.err == nil {
			floorMoves.Store(name, [2]time.Time{mt.began, mt.ended})
		}
	}()
	return nil
}

// CreateContainer lets the pod's container be made once its move ended.
func (m *moveFloor) CreateContainer(_ context.Context, pod *api.PodSandbox, _ *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	m.mu.Lock()
	mt := m.moving[pod.GetName()]
	m.mu.Unlock()
	if mt == nil {
		return nil, nil, nil
	}
	<-mt.done
	return nil, nil, mt.err
}

// floorMoves are the move floor's moves that succeeded, by the name of
// the pod: when each began and ended.
var floorMoves sync.Map // pod name → [2]time.Time

// failed is every move that failed, by pod, once ended.
func (m *moveFloor) failed() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for pod, mt := range m.moving {
		select {
		case <-mt.done:
			if mt.err != nil {
				out = append(out, pod+": "+mt.err.Error())
			}
		default:
		}
	}
	return out
}

// moveInto moves the host's link into the network namespace at path as
// net1, with fastpath's claim's MTU and address, up: the calls
// BenchmarkFloor/attach makes.
func moveInto(link, path string) error {
	l, err := netlink.LinkByName(link)
	if err != nil {
		return err
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("the pod's network namespace %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := netlink.LinkSetNsFd(l, int(ns)); err != nil {
		return fmt.Errorf("move %s: %w", link, err)
	}
	in, err := h.LinkByName(link)
	if err != nil {
		return err
	}
	if err := h.LinkSetName(in, "net1"); err != nil {
		return err
	}
	if err := h.LinkSetMTU(in, 9000); err != nil {
		return err
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 95, 0, 2), Mask: net.CIDRMask(24, 32)}}
	if err := h.AddrAdd(in, addr); err != nil {
		return err
	}
	return h.LinkSetUp(in)
}
