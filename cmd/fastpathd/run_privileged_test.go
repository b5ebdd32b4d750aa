//go:build privileged

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/test/fulldisk"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// A daemon started while the API server cannot be reached (a restart
// during an outage) serves the runtime's hooks of the claims it prepared
// before: a pod's sandbox created meanwhile gets its netdev, and the
// daemon says it is not ready.
func TestRunServesHooksWithoutAPIServer(t *testing.T) {
	testRunWithoutAPIServer(t, "fpr", false)
}

// So it does with its state directory on a disk that is nearly full (a
// tmpfs of its own, with less free space than the claim store keeps for
// its writes): the hooks of the claim prepared before still have room for
// theirs, and the daemon says it is not ready, naming the store.
func TestRunOnFullStateDisk(t *testing.T) {
	testRunWithoutAPIServer(t, "fpd", true)
}

func testRunWithoutAPIServer(t *testing.T, prefix string, fullDisk bool) {
	id := fmt.Sprintf("%s%d", prefix, os.Getpid()%100000)
	host := netnstest.Veth(t, id+"a", id+"b")
	podNS := netnstest.New(t, id)
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	if fullDisk {
		fulldisk.Tmpfs(t, stateDir, 4<<20)
	}
	boot, err := claims.BootID()
	if err != nil {
		t.Fatal(err)
	}
	store, err := claims.Open(filepath.Join(stateDir, "checkpoint.json"), checkpointLegacy(stateDir))
	if err != nil {
		t.Fatal(err)
	}
	claim := claims.Claim{Driver: claims.DriverFastpath, UID: "uid-outage", Namespace: "default", Name: "outage",
		Pod: claims.Pod{UID: "pod-outage", Name: "pod-outage"}, Prepared: true, BootID: boot,
		Devices: []claims.Device{{Request: "nic", Pool: "node-a", Device: "netdev-" + host.Attrs().Name, Kind: "netdev", Mode: "netdev",
			Host: &claims.HostNetdev{Name: host.Attrs().Name, MTU: host.Attrs().MTU, MAC: host.Attrs().HardwareAddr.String()},
			Pod:  &claims.PodInterface{Name: "net1", Addresses: []string{"10.77.0.2/24"}}}}}
	if err := store.Put(claim); err != nil {
		t.Fatal(err)
	}
	if fullDisk {
		// Below the store's floor (storewatch.DefaultMinFree), with
		// room for the hooks' writes.
		fulldisk.Fill(t, stateDir, 256<<10)
	}

	// The runtime's side of NRI, on a socket of the test's.
	nriSocket := filepath.Join(dir, "nri.sock")
	runtime, err := adaptation.New("test-runtime", "v1",
		func(ctx context.Context, cb adaptation.SyncCB) error {
			_, err := cb(ctx, nil, nil)
			return err
		},
		func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
			return nil, nil
		},
		adaptation.WithSocketPath(nriSocket), adaptation.WithPluginPath(filepath.Join(dir, "nri-plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "nri-conf")))
	if err != nil {
		t.Fatal(err)
	}
	if err := runtime.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(runtime.Stop)

	var o runOptions
	fs := newRunFlagSet(io.Discard, logsapi.NewLoggingConfiguration())
	o.addFlags(fs)
	healthSocket := filepath.Join(dir, "health.sock")
	if err := parseFlags(fs, []string{"--node-name=node-a", "--state-dir=" + stateDir, "--plugin-dir=" + filepath.Join(dir, "plugin"),
		"--registry-dir=" + filepath.Join(dir, "registry"), "--cdi-dir=" + filepath.Join(dir, "cdi"), "--nri-socket=" + nriSocket,
		"--bpf-dir=" + filepath.Join(dir, "bpf"), "--metrics-addr=", "--health-socket=" + healthSocket,
		"--sysfs-root=" + filepath.Join("..", "..", "devices", "testdata", "sysfs", "plain")}); err != nil {
		t.Fatal(err)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	discoverer, err := o.discoverer("run")
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	// Nothing listens there.
	unreachable := &rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second}
	done := make(chan error, 1)
	go func() { done <- run(ctx, o, unreachable, discoverer) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && ctx.Err() == nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not return after its context ended")
		}
	})

	pod := &api.PodSandbox{Uid: string(claim.Pod.UID), Id: "sandbox-outage", Name: claim.Pod.Name, Namespace: claim.Namespace,
		Linux: &api.LinuxPodSandbox{Namespaces: []*api.LinuxNamespace{{Type: "network", Path: podNS}}}}
	// The sandbox is created once the daemon connected (RunPodSandbox
	// reaches the plugins connected by then; attaching again is harmless).
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := runtime.RunPodSandbox(ctx, &adaptation.RunPodSandboxRequest{Pod: pod}); err != nil {
			return false, err
		}
		addrs, err := netnsAddrs(podNS, "net1")
		return err == nil && slices.Equal(addrs, []string{"10.77.0.2/24"}), nil
	}); err != nil {
		addrs, lerr := netnsAddrs(podNS, "net1")
		t.Fatalf("the pod's net1 after its sandbox was created during the outage: %v %v, want it with 10.77.0.2/24 (%v)", addrs, lerr, err)
	}
	var out strings.Builder
	if err := probeCommand([]string{"--socket", healthSocket, "ready"}, &out, &out); err == nil || !strings.Contains(err.Error(), "waiting for the API server") {
		t.Errorf("probe ready while the API server cannot be reached: %v %s; want not ready, waiting for the API server", err, out.String())
	} else if want := "the claim store cannot be written: the filesystem of " + stateDir + " has "; fullDisk != strings.Contains(err.Error(), want) {
		t.Errorf("probe ready with the state directory's disk full: %t: %v; want %q in it: %t", fullDisk, err, want, fullDisk)
	}
	if err := probeCommand([]string{"--socket", healthSocket, "alive"}, &out, &out); err != nil {
		t.Errorf("probe alive while the API server cannot be reached: %v", err)
	}
	if err := runtime.StopPodSandbox(ctx, &adaptation.StopPodSandboxRequest{Pod: pod}); err != nil {
		t.Fatalf("StopPodSandbox: %v", err)
	}
	if _, err := netlink.LinkByName(host.Attrs().Name); err != nil {
		t.Errorf("the netdev is not back on the node after StopPodSandbox: %v", err)
	}
}

// netnsAddrs are the IPv4 addresses of the link named name in the network
// namespace at path; an error when it has no such link.
func netnsAddrs(path, name string) ([]string, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		return nil, err
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_V4)
	var out []string
	for _, a := range addrs {
		out = append(out, a.IPNet.String())
	}
	return out, err
}
