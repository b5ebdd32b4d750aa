package dra

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/apimachinery/pkg/util/wait"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
)

// TestPrepareRereadsCDIOnce: the runtime's CDI cache reads every spec of
// the node again for each spec written, renamed or removed in its
// directory. A claim prepared through the kubelet plugin helper with
// device metadata on has the runtime read them once, at the helper's
// metadata spec: fastpath's own spec is moved in quietly before it. The
// runtime's cache (the CDI library containerd and CRI-O run, rereading
// on its directory's changes) still resolves both devices. Without
// metadata, fastpath's own spec is the one the runtime is told of. Once
// each, not twice or none.
func TestPrepareRereadsCDIOnce(t *testing.T) {
	for _, metadata := range []bool{true, false} {
		t.Run(map[bool]string{true: "metadata", false: "no-metadata"}[metadata], func(t *testing.T) {
			claim := testClaim("web", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaimFor("nic", config(`"interface": {"name": "net1"}`)))
			tweak := func(o *Options) {
				if metadata {
					o.Metadata = &kubelet.Metadata{CDIDir: o.CDIDir}
				}
			}
			d, k, ctx := startTestDriverWith(t, &fakePF{}, tweak, &fakeObject{claim})
			if err := os.MkdirAll(d.opts.CDIDir, 0o750); err != nil {
				t.Fatal(err)
			}
			cache, err := cdi.NewCache(cdi.WithSpecDirs(d.opts.CDIDir), cdi.WithAutoRefresh(true))
			if err != nil {
				t.Fatal(err)
			}
			rereads := watchRereads(t, d.opts.CDIDir)

			resp, err := k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{
				{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}})
			if err != nil || resp.Claims[string(claim.UID)].Error != "" {
				t.Fatalf("prepare: %v %+v", err, resp)
			}
			var ids []string
			for _, dev := range resp.Claims[string(claim.UID)].Devices {
				ids = append(ids, dev.CdiDeviceIds...)
			}
			if want := map[bool]int{true: 2, false: 1}[metadata]; len(ids) != want {
				t.Fatalf("CDI devices %v, want %d", ids, want)
			}
			// The runtime's cache, as it would be when the kubelet
			// creates the pod's containers.
			if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				for _, id := range ids {
					if cache.GetDevice(id) == nil {
						return false, nil
					}
				}
				return true, nil
			}); err != nil {
				t.Fatalf("the runtime's CDI cache never resolved %v (it has %v)", ids, cache.ListDevices())
			}
			got := rereads()
			want := filepath.Join(d.opts.CDIDir, cdiVendor+"-claim-"+string(claim.UID)+".json")
			if metadata {
				want = filepath.Join(d.opts.CDIDir, devices.DriverName+"_metadata_"+string(claim.UID)+"_nic.json")
			}
			if len(got) != 1 || !strings.HasPrefix(filepath.Base(got[0]), "."+filepath.Base(want)+".") {
				t.Errorf("the runtime reread its specs for %v, want once, for the temporary file of %s", got, want)
			}
		})
	}
}

// watchRereads watches dir as the CDI library's cache does, and returns
// a function that gives the files whose events made the cache read every
// spec again (on Linux: a rename or a removal of any file, a write of a
// .json or .yaml one), until then: it writes a file of its own into dir
// and takes the events before that one's.
func watchRereads(t *testing.T, dir string) func() []string {
	t.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	return func() []string {
		t.Helper()
		marker := filepath.Join(dir, "zz-test-marker.json")
		if err := claims.ReplaceFileUnsynced(marker, []byte(`{}`), 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(marker)
		var out []string
		deadline := time.After(10 * time.Second)
		for {
			select {
			case e := <-w.Events:
				if strings.HasPrefix(filepath.Base(e.Name), "."+filepath.Base(marker)+".") && e.Op.Has(fsnotify.Rename) {
					return out
				}
				ext := filepath.Ext(e.Name)
				if e.Op.Has(fsnotify.Rename) || e.Op.Has(fsnotify.Remove) || (e.Op.Has(fsnotify.Write) && (ext == ".json" || ext == ".yaml")) {
					out = append(out, e.Name)
				}
			case err := <-w.Errors:
				t.Fatal(err)
			case <-deadline:
				t.Fatalf("no event of the marker %s after 10s; the others: %v", marker, out)
			}
		}
	}
}
