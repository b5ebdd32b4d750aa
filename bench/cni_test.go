package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/fastpath-dra/fastpath/test/testbed"
)

// cniConfig runs the reference CNI plugins through libcni, as a runtime (and
// Multus behind it) does.
func cniConfig(b *testing.B) *libcni.CNIConfig {
	b.Helper()
	dir := cniBinDir(b, "host-device", "macvlan", "tuning", "static")
	return libcni.NewCNIConfigWithCacheDir([]string{dir}, b.TempDir(), nil)
}

// cniBinDir is the directory of the reference CNI plugins test/deps.sh
// builds; the benchmark fails if one of plugins is not there.
func cniBinDir(b *testing.B, plugins ...string) string {
	b.Helper()
	cfg, err := testbed.Config{}.Defaults()
	if err != nil {
		b.Fatal(err)
	}
	dir := cfg.CNIBinDir()
	for _, p := range plugins {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			b.Fatalf("CNI plugin %s is not built: run `make deps` (%v)", p, err)
		}
	}
	return dir
}

// BenchmarkCNI is the same attach as BenchmarkAttach (move or create, name,
// MTU, MAC, address, up) done by the reference plugins through libcni: what
// users of Multus with sriov-cni-like plugins pay. host-device moves the
// device through a temporary namespace (two moves); macvlan creates a new
// device in the pod instead of moving one. DEL between iterations is not
// timed.
func BenchmarkCNI(b *testing.B) {
	const ipam = `"ipam": {"type": "static", "addresses": [{"address": "10.90.0.2/24"}]}`
	for _, tc := range []struct{ name, plugin string }{
		{"host-device", `{"type": "host-device", "device": %q, ` + ipam + `}`},
		{"macvlan", `{"type": "macvlan", "master": %q, "mode": "bridge", ` + ipam + `}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			podNS, _ := benchNetNS(b)
			host := benchVeth(b)
			cni := cniConfig(b)
			conf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "bench", "plugins": [%s,
				{"type": "tuning", "mtu": 1400, "mac": "02:00:00:be:0c:02"}]}`, fmt.Sprintf(tc.plugin, host.Attrs().Name))
			list, err := libcni.ConfListFromBytes([]byte(conf))
			if err != nil {
				b.Fatal(err)
			}
			rt := &libcni.RuntimeConf{ContainerID: "bench", NetNS: podNS, IfName: "net1"}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := cni.AddNetworkList(ctx, list, rt); err != nil {
					b.Fatalf("ADD: %v", err)
				}
				b.StopTimer()
				if err := cni.DelNetworkList(ctx, list, rt); err != nil {
					b.Fatalf("DEL: %v", err)
				}
				b.StartTimer()
			}
		})
	}
}
