package dra

import (
	"bytes"
	"os"
	"testing"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// TestRebootWritesDeviceInfoAgain: a device-info file is not synced, and
// a power cut may take it; the next boot's start (Reconcile) does the
// steps of the claims prepared in the boot before again, and the file is
// back as it was, before the kubelet makes the pod's containers again.
func TestRebootWritesDeviceInfoAgain(t *testing.T) {
	claim := testClaim("web", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaimFor("nic", config(`"interface": {"name": "net1"}`)))
	d, k, ctx := startTestDriver(t, &fakeObject{claim})
	if e := prepare(t, ctx, k, claim); e != "" {
		t.Fatalf("prepare: %s", e)
	}
	key := claims.Key{Driver: claims.DriverFastpath, UID: claim.UID}
	rec, _ := d.opts.Store.Get(key)
	file := rec.Devices[0].DeviceInfoFile
	before, err := os.ReadFile(file)
	if err != nil || len(before) == 0 {
		t.Fatalf("device-info file %q: %q, %v", file, before, err)
	}
	// The node lost power: the file is gone, the record is of the boot
	// before.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	rec.BootID = "the-boot-before"
	if err := d.opts.Store.Put(rec); err != nil {
		t.Fatal(err)
	}
	if err := d.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if after, err := os.ReadFile(file); err != nil || !bytes.Equal(after, before) {
		t.Errorf("device-info after the reboot's start: %q, %v; want %q", after, err, before)
	}
	unprepare(t, ctx, k, claim)
	assertNothingLeft(t, d)
}
