package dra

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/status"
)

func newAdminDriver(t *testing.T, client *fake.Clientset) *Driver {
	t.Helper()
	dir := t.TempDir()
	d, err := New(Options{NodeName: testNode, Client: client, PluginDir: filepath.Join(dir, "plugins"), StateDir: filepath.Join(dir, "state"),
		CDIDir: filepath.Join(dir, "cdi"), Store: testStore(t), Status: status.NewWriter(client), BootID: "boot"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestPrepareAdmin: a claim allocated with adminAccess gets, per device,
// its view's directory mounted read-only and its path in the environment,
// the view written, the Ready condition AdminView; nothing enters the
// store. Unprepare removes the spec, the views and the record. A claim
// with admin and own devices is refused, naming both requests.
func TestPrepareAdmin(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	claim := testClaim("mon", []alloc{{Request: "view", Device: vfNetdev}, {Request: "view", Device: vfVFIO}})
	claim.Spec.Devices.Requests[0].Exactly.Count = 2
	claim.Spec.Devices.Requests = claim.Spec.Devices.Requests[:1]
	for i := range claim.Status.Allocation.Devices.Results {
		claim.Status.Allocation.Devices.Results[i].AdminAccess = new(true)
	}
	client := fake.NewClientset(claim)
	d := newAdminDriver(t, client)
	d.opts.Status.Start(ctx)
	d.UseInventory(testInventory(t))

	res := d.prepareClaim(ctx, claim)
	if res.Err != nil {
		t.Fatalf("prepare: %v", res.Err)
	}
	if len(res.Devices) != 2 || res.Devices[0].DeviceName != vfNetdev || res.Devices[1].CDIDeviceIDs[0] != cdiKind+"="+string(claim.UID)+"-view.1" {
		t.Fatalf("prepared %+v", res.Devices)
	}
	if len(d.opts.Store.View()) != 0 {
		t.Errorf("an admin-access claim entered the store: %+v", d.opts.Store.View())
	}
	data, err := os.ReadFile(cdiSpecPath(d.opts.CDIDir, claim.UID))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	dev := spec.Devices[0]
	if len(dev.ContainerEdits.Mounts) != 1 || dev.ContainerEdits.Mounts[0].ContainerPath != AdminViewDir+"/view.0" || !slices.Contains(dev.ContainerEdits.Mounts[0].Options, "ro") ||
		!slices.Contains(dev.ContainerEdits.Env, "FASTPATH_ADMIN_VIEW_VIEW_0="+AdminViewDir+"/view.0/view.json") {
		t.Errorf("CDI device %+v: want its view mounted read-only at %s/view.0 and named in the environment", dev, AdminViewDir)
	}
	var view AdminView
	data, err = os.ReadFile(filepath.Join(dev.ContainerEdits.Mounts[0].HostPath, "view.json"))
	if err == nil {
		err = json.Unmarshal(data, &view)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The fixture's netdev is not on this host: the view says so.
	if view.Device != vfNetdev || view.Node != testNode || len(view.Holders) != 0 || !strings.Contains(view.Error, "ens1f0v0") {
		t.Errorf("view %+v", view)
	}
	d.opts.Status.Wait()
	got, _ := client.ResourceV1().ResourceClaims("default").Get(ctx, claim.Name, metav1.GetOptions{})
	if len(got.Status.Devices) != 2 || got.Status.Devices[0].Conditions[0].Reason != ReasonAdminView || !strings.Contains(string(got.Status.Devices[0].Data.Raw), "view.json") {
		t.Errorf("status %+v", got.Status.Devices)
	}

	// Prepared again (the kubelet's retry): the same.
	if again := d.prepareClaim(ctx, claim); again.Err != nil || len(again.Devices) != 2 {
		t.Errorf("prepared again: %+v", again)
	}
	if err := d.unprepare(ctx, claims.Key{Driver: claims.DriverFastpath, UID: claim.UID}); err != nil {
		t.Fatal(err)
	}
	if exists(cdiSpecPath(d.opts.CDIDir, claim.UID)) || exists(d.adminDir(claim.UID)) {
		t.Errorf("unprepared: the CDI spec or %s is left", d.adminDir(claim.UID))
	}

	mixed := testClaim("mixed", []alloc{{Request: "view", Device: vfNetdev}, {Request: "own", Device: vfVFIO}})
	mixed.Status.Allocation.Devices.Results[0].AdminAccess = new(true)
	res = d.prepareClaim(ctx, mixed)
	if res.Err == nil || !strings.Contains(res.Err.Error(), `request "view" has adminAccess and request "own" does not`) {
		t.Errorf("a claim of views and own devices: %v", res.Err)
	}
	if exists(d.adminDir(mixed.UID)) || len(d.opts.Store.View()) != 0 {
		t.Error("the refused claim left a record")
	}
}
