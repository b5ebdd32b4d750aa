//go:build privileged

package dra

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/fastpath-dra/fastpath/bpf"
	"github.com/fastpath-dra/fastpath/dra/attach"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// TestKubeletAFXDP: Prepare of an afxdp claim loads xsk-redirect and pins
// it with its maps in the claim's directory on a bpffs (mounted there
// first), which the CDI spec mounts into the containers with env naming the
// map, the queues and the interface; the pod's netdev plan carries the
// program. Unprepare removes the directory. A claim for a program that is
// not shipped pins nothing.
func TestKubeletAFXDP(t *testing.T) {
	good := testClaim("xsk", []alloc{{Request: "xsk", Device: vfNetdev}}, fromClaim(config(`"mode": "afxdp", "interface": {"name": "xsk0"}, "xdp": {"queues": 2}`)))
	bad := testClaim("bad", []alloc{{Request: "xsk", Device: vfNetdev}}, fromClaim(config(`"mode": "afxdp", "xdp": {"program": "xdp-pwn"}`)))
	d, k, ctx := startTestDriver(t, &fakeObject{good}, &fakeObject{bad})
	t.Cleanup(func() { _ = unix.Unmount(d.opts.BPFDir, unix.MNT_DETACH) })
	channels := &fakeChannels{cur: 8, max: 16}
	d.Driver.opts.Channels = channels

	msg := prepare(t, ctx, k, bad)
	for _, want := range []string{"claim default/bad", `request "xsk"`, "xdp.program", "xsk-redirect"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not name %q", msg, want)
		}
	}
	if entries, _ := os.ReadDir(d.opts.BPFDir); len(entries) != 0 {
		t.Errorf("pinned after a refused claim: %v", entries)
	}

	if e := prepare(t, ctx, k, good); e != "" {
		t.Fatalf("prepare: %s", e)
	}
	dir := filepath.Join(d.opts.BPFDir, string(good.UID)+"-xsk")
	for _, pin := range []string{bpf.PinProgram, bpf.PinXSKMap, bpf.PinStats} {
		if _, err := os.Stat(filepath.Join(dir, pin)); err != nil {
			t.Errorf("%s not pinned: %v", pin, err)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
		t.Errorf("%s is not on a bpffs (%v)", dir, err)
	}
	spec, err := cdi.ReadSpec(cdiSpecPath(d.opts.CDIDir, good.UID), 0)
	if err != nil {
		t.Fatal(err)
	}
	dev := spec.GetDevice("uid-xsk-xsk")
	env := strings.Join(dev.ContainerEdits.Env, " ")
	for _, want := range []string{"FASTPATH_XSKMAP_XSK=/run/fastpath/xdp/xsk/xsks", "FASTPATH_XDP_QUEUES_XSK=0-1",
		"FASTPATH_INTERFACE_XSK=xsk0", "FASTPATH_XDP_PROGRAM_XSK=xsk-redirect", "FASTPATH_XDP_ZEROCOPY_XSK=preferred"} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %s: %s", want, env)
		}
	}
	if m := dev.ContainerEdits.Mounts[0]; m.HostPath != dir || m.ContainerPath != "/run/fastpath/xdp/xsk" {
		t.Errorf("first mount = %+v, want the pin directory", m)
	}
	rec, _ := d.store.Get(claims.Key{Driver: claims.DriverFastpath, UID: good.UID})
	if nd, ok := attach.Netdev(rec.Devices[0]); !ok || nd.XDP == nil || nd.XDP.Dir != dir || nd.XDP.Mode != bpf.Native {
		t.Errorf("the pod's netdev = %+v, want one with the program to attach", nd)
	}

	if got := strings.Join(channels.set, " "); got != "ens1f0v0=2" {
		t.Errorf("channels set at Prepare: %q, want ens1f0v0=2", got)
	}

	unprepare(t, ctx, k, good)
	if got := strings.Join(channels.set, " "); got != "ens1f0v0=2 ens1f0v0=8" {
		t.Errorf("channels set: %q, want the 8 from before restored", got)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there after Unprepare: %v", dir, err)
	}
	assertNothingLeft(t, d)
}

// fakeChannels records the combined channel counts set.
type fakeChannels struct {
	cur, max int
	set      []string
}

func (f *fakeChannels) Combined(string) (int, int, error) { return f.cur, f.max, nil }
func (f *fakeChannels) SetCombined(ifName string, n int) error {
	f.set = append(f.set, fmt.Sprintf("%s=%d", ifName, n))
	return nil
}
