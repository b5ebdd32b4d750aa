//go:build privileged && faultinject

package dra_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/metrics"
	"github.com/fastpath-dra/fastpath/dra/status"
)

func init() { addWorker[adminJob]("admin") }

// adminJob is one life of a daemon that serves admin-access claims: it
// starts (Reconcile, in boot BootID), then prepares or unprepares Claim.
type adminJob struct {
	Dir       string
	BootID    string
	Inventory devices.Inventory
	Claim     *resourceapi.ResourceClaim
	Op        string // prepare | unprepare | none
}

func (j adminJob) run() error {
	ctx := klog.NewContext(context.Background(), logr.Discard())
	store, err := claims.Open(filepath.Join(j.Dir, "state", "checkpoint.json"), claims.Legacy{})
	if err != nil {
		return err
	}
	client := fake.NewClientset(j.Claim)
	writer := status.NewWriter(client)
	writer.Start(ctx)
	d, err := dra.New(dra.Options{NodeName: testNode, Client: client, PluginDir: filepath.Join(j.Dir, "plugin"), StateDir: filepath.Join(j.Dir, "state"),
		CDIDir: filepath.Join(j.Dir, "cdi"), BPFDir: filepath.Join(j.Dir, "bpf"), Store: store, Status: writer, BootID: j.BootID, Metrics: metrics.New()})
	if err != nil {
		return err
	}
	d.UseInventory(j.Inventory)
	if err := d.Reconcile(ctx); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	switch j.Op {
	case "prepare":
		res, _ := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{j.Claim})
		return res[j.Claim.UID].Err
	case "unprepare":
		ref := kubeletplugin.NamespacedObject{UID: j.Claim.UID, NamespacedName: types.NamespacedName{Namespace: j.Claim.Namespace, Name: j.Claim.Name}}
		out, _ := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{ref})
		return out[j.Claim.UID]
	case "none":
		return nil
	}
	return fmt.Errorf("unknown operation %q", j.Op)
}

// TestFaultAdmin kills the daemon at each fault point of an admin-access
// claim's life (admin.*), and after each kill replays what the kubelet
// may do: Prepare again, which leaves the node as an uninterrupted Prepare
// does, or Unprepare (the pod went), which leaves nothing. A reboot, which
// takes the CDI directory (a tmpfs) with it, gets the claim's CDI spec
// written again at the daemon's start: the kubelet does not prepare a
// prepared claim again. TestFaults lists these points as tested here.
func TestFaultAdmin(t *testing.T) {
	inv := testInventory(t)
	claim := testClaim("mon", []alloc{{Request: "view", Device: vfNetdev}})
	claim.Status.Allocation.Devices.Results[0].AdminAccess = new(true)
	job := func(dir, op string) adminJob {
		return adminJob{Dir: dir, BootID: "boot-1", Inventory: inv, Claim: claim, Op: op}
	}
	must := func(t *testing.T, j adminJob) {
		t.Helper()
		if killed, err := runWorker("admin", j.Op, j, ""); err != nil || killed {
			t.Fatalf("%s: killed %v, %v", j.Op, killed, err)
		}
	}
	kill := func(t *testing.T, j adminJob, point string) {
		t.Helper()
		if killed, err := runWorker("admin", j.Op, j, point); err != nil || !killed {
			t.Fatalf("%s was not killed at %s: %v", j.Op, point, err)
		}
	}

	// The references: prepared, and nothing left after Unprepare.
	ref := t.TempDir()
	must(t, job(ref, "prepare"))
	prepared := adminFiles(t, ref)
	if len(prepared) < 3 {
		t.Fatalf("an uninterrupted Prepare left %v: want the record, a view and the CDI spec", prepared)
	}
	must(t, job(ref, "unprepare"))
	if left := adminFiles(t, ref); len(left) != 0 {
		t.Fatalf("an uninterrupted Unprepare left %v", left)
	}

	for _, point := range []string{"admin.recorded", "admin.cdi"} {
		t.Run(point+"/Prepare retried", func(t *testing.T) {
			dir := t.TempDir()
			kill(t, job(dir, "prepare"), point)
			must(t, job(dir, "prepare"))
			if got := adminFiles(t, dir); !maps.Equal(got, prepared) {
				t.Errorf("after the retry: %v, want %v", got, prepared)
			}
			must(t, job(dir, "unprepare"))
			if left := adminFiles(t, dir); len(left) != 0 {
				t.Errorf("left after Unprepare: %v", left)
			}
		})
		t.Run(point+"/Unprepare", func(t *testing.T) {
			dir := t.TempDir()
			kill(t, job(dir, "prepare"), point)
			must(t, job(dir, "unprepare"))
			if left := adminFiles(t, dir); len(left) != 0 {
				t.Errorf("left after Unprepare: %v", left)
			}
		})
	}
	t.Run("admin.unprepare.cdi/Unprepare retried", func(t *testing.T) {
		dir := t.TempDir()
		must(t, job(dir, "prepare"))
		kill(t, job(dir, "unprepare"), "admin.unprepare.cdi")
		must(t, job(dir, "unprepare"))
		if left := adminFiles(t, dir); len(left) != 0 {
			t.Errorf("left after Unprepare: %v", left)
		}
	})
	t.Run("a kill before the record", func(t *testing.T) {
		// The claim's directory made, its record not yet written.
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "state", "admin", string(claim.UID)), 0o755); err != nil {
			t.Fatal(err)
		}
		must(t, job(dir, "unprepare"))
		if left := adminFiles(t, dir); len(left) != 0 {
			t.Errorf("left after Unprepare: %v", left)
		}
	})
	t.Run("reboot", func(t *testing.T) {
		dir := t.TempDir()
		must(t, job(dir, "prepare"))
		if err := os.RemoveAll(filepath.Join(dir, "cdi")); err != nil {
			t.Fatal(err)
		}
		next := job(dir, "none")
		next.BootID = "boot-2"
		must(t, next)
		if got := adminFiles(t, dir); !maps.Equal(got, prepared) {
			t.Errorf("after the reboot: %v, want %v (the CDI spec written again)", got, prepared)
		}
	})
}

// adminFiles are the files of admin-access claims on the node under dir,
// the CDI specs among them, with the CDI specs' contents (dir in them as
// $DIR).
func adminFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, sub := range []string{filepath.Join("state", "admin"), "cdi"} {
		root := filepath.Join(dir, sub)
		err := filepath.WalkDir(root, func(path string, e os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			switch {
			case path == root:
			case e.IsDir():
				out[rel+"/"] = ""
			case sub == "cdi":
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				// Paths under dir as the same whatever dir is.
				out[rel] = strings.ReplaceAll(string(data), dir, "$DIR")
			default:
				out[rel] = "" // the views change every read
			}
			return nil
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	return out
}
