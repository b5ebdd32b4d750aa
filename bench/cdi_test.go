package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/fastpath-dra/fastpath/dra"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// BenchmarkCDIRefresh times what the runtime does each time a CDI spec of
// the node is written or removed: containerd's CDI cache watches the spec
// directories and reads every spec again on each change (a spec's rename
// into place, its removal). A prepared netdev claim has two specs,
// fastpath's own (dra.WriteCDISpec) and the one of its device metadata
// (the kubelet plugin helper's, which mounts the metadata file); a burst
// of n claims writes 2n specs, and the runtime reads all those there
// once per claim (fastpath's own is moved in quietly before the helper's:
// dra.TestPrepareRereadsCDIOnce), where it did twice.
func BenchmarkCDIRefresh(b *testing.B) {
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("claims=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			for i := range n {
				uid := types.UID(fmt.Sprintf("0f6c1b2e-7d4a-4c1e-9b7e-%012d", i))
				c := claims.Claim{Driver: claims.DriverFastpath, UID: uid, Namespace: "default", Name: fmt.Sprintf("pod-%d-fast", i),
					CDISpec: filepath.Join(dir, "fastpath.dev-claim-"+string(uid)+".json"),
					Devices: []claims.Device{{Request: "nic", Pool: "node-a", Device: fmt.Sprintf("netdev-fp%d", i), Kind: "netdev", Mode: "netdev",
						PCIAddress: fmt.Sprintf("0000:3b:%02x.%d", i/8, i%8), Pod: &claims.PodInterface{Name: "net1"}}}}
				if err := dra.WriteCDISpec(&c); err != nil {
					b.Fatal(err)
				}
				writeMetadataSpec(b, dir, uid, c.Name)
			}
			cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
			if err != nil {
				b.Fatal(err)
			}
			if got := len(cache.ListDevices()); got != 2*n {
				b.Fatalf("the cache holds %d devices, want %d", got, 2*n)
			}
			b.ResetTimer()
			for b.Loop() {
				if err := cache.Refresh(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(2*n), "µs/spec")
		})
	}
}

// writeMetadataSpec writes a spec as the kubelet plugin helper writes one
// for a request's device metadata.
func writeMetadataSpec(b *testing.B, dir string, uid types.UID, claim string) {
	b.Helper()
	spec := cdispec.Spec{Version: "0.6.0", Kind: claims.DriverFastpath + "/metadata", Devices: []cdispec.Device{{
		Name: string(uid) + "_nic",
		ContainerEdits: cdispec.ContainerEdits{Mounts: []*cdispec.Mount{{
			HostPath:      "/var/lib/kubelet/plugins/fastpath.dev/dra-device-metadata/default_" + claim + "/nic/metadata.json",
			ContainerPath: "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/fast/nic/fastpath.dev-metadata.json",
			Options:       []string{"ro", "bind"},
		}}},
	}}}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, claims.DriverFastpath+"_metadata_"+string(uid)+"_nic.json"), data, 0o644); err != nil {
		b.Fatal(err)
	}
}
