package dra

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/kubelet"
)

// TestRestoreMetadataSpecs: a reboot empties the CDI directory (a tmpfs)
// and leaves the metadata files and the kubelet's memory of the claims as
// prepared; the daemon writes each claim's metadata spec again, as the
// kubelet plugin helper wrote it at Prepare, byte for byte, for a claim
// of its own and one made from a pod's template (whose path in the
// container is the pod's name for it), and leaves a spec that is there;
// one a power cut emptied is written again, and so is a metadata file's
// write a kill cut short.
func TestRestoreMetadataSpecs(t *testing.T) {
	own := testClaim("own", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaimFor("nic", config(`"interface": {"name": "net1"}`)))
	fromTemplate := testClaim("pod-1-fast-x7k2p", []alloc{{Request: "nic", Device: vfNetdev2}}, fromClaimFor("nic", config(`"interface": {"name": "net2"}`)))
	fromTemplate.Annotations = map[string]string{resourceapi.PodResourceClaimAnnotation: "fast"}
	d, k, ctx := startTestDriverWith(t, &fakePF{}, func(o *Options) { o.Metadata = &kubelet.Metadata{CDIDir: o.CDIDir} },
		&fakeObject{own}, &fakeObject{fromTemplate})
	specs := map[string][]byte{}
	for _, c := range []*resourceapi.ResourceClaim{own, fromTemplate} {
		resp, err := k.dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{
			{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}}})
		if err != nil || resp.Claims[string(c.UID)].Error != "" {
			t.Fatalf("prepare %s: %v %+v", c.Name, err, resp)
		}
		spec := filepath.Join(d.opts.CDIDir, devices.DriverName+"_metadata_"+string(c.UID)+"_nic.json")
		data, err := os.ReadFile(spec)
		if err != nil {
			t.Fatalf("the helper wrote no metadata spec for %s: %v", c.Name, err)
		}
		specs[spec] = data
	}
	if bytes.Equal(specs[filepath.Join(d.opts.CDIDir, devices.DriverName+"_metadata_"+string(own.UID)+"_nic.json")],
		specs[filepath.Join(d.opts.CDIDir, devices.DriverName+"_metadata_"+string(fromTemplate.UID)+"_nic.json")]) {
		t.Fatal("the two claims' specs are the same")
	}
	dirs := map[string]string{devices.DriverName: d.opts.PluginDir}

	// Nothing gone: nothing written.
	if restored, err := kubelet.RestoreMetadataSpecs(d.store, d.opts.CDIDir, dirs); err != nil || len(restored) != 0 {
		t.Fatalf("with every spec there: restored %v, %v", restored, err)
	}
	// A reboot took one; a power cut emptied the other (the helper's
	// specs are not synced) and left a temporary file of a write.
	emptied := false
	for spec := range specs {
		var err error
		if emptied {
			err = os.Remove(spec)
		} else {
			err = os.Truncate(spec, 0)
		}
		if err != nil {
			t.Fatal(err)
		}
		emptied = true
	}
	temp := filepath.Join(d.opts.CDIDir, "."+devices.DriverName+"_metadata_"+string(own.UID)+"_nic.json.k1lled")
	if err := os.WriteFile(temp, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	// And a write of a metadata file in place was cut short: its new
	// content is beside it, the file holds half of it.
	file := filepath.Join(d.opts.PluginDir, "dra-device-metadata", own.Namespace+"_"+own.Name, "nic", "metadata.json")
	whole, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(filepath.Dir(file), ".metadata.json.next")
	if err := os.WriteFile(next, whole, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file, int64(len(whole)/2)); err != nil {
		t.Fatal(err)
	}
	restored, err := kubelet.RestoreMetadataSpecs(d.store, d.opts.CDIDir, dirs)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(file); !bytes.Equal(got, whole) {
		t.Errorf("the metadata file cut short holds after the restore\n%s\nwant\n%s", got, whole)
	}
	if _, err := os.Stat(next); !os.IsNotExist(err) {
		t.Errorf("the new content kept beside the metadata file is left: %v", err)
	}
	slices.Sort(restored)
	want := slices.Sorted(func(yield func(string) bool) {
		for spec := range specs {
			if !yield(spec) {
				return
			}
		}
	})
	if !slices.Equal(restored, want) {
		t.Fatalf("restored %v, want %v", restored, want)
	}
	if _, err := os.Stat(temp); !os.IsNotExist(err) {
		t.Errorf("the temporary file of a killed write is left: %v", err)
	}
	for spec, before := range specs {
		after, err := os.ReadFile(spec)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(after, before) {
			t.Errorf("%s written again as\n%s\nthe helper wrote\n%s", spec, after, before)
		}
	}
	for _, c := range []*resourceapi.ResourceClaim{own, fromTemplate} {
		unprepare(t, ctx, k, c)
	}
	if restored, err := kubelet.RestoreMetadataSpecs(d.store, d.opts.CDIDir, dirs); err != nil || len(restored) != 0 {
		t.Fatalf("with no claim prepared: restored %v, %v", restored, err)
	}
}
