package bench

import (
	"fmt"
	"testing"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/test/netnstest"
)

// BenchmarkDiscoverLive is one discovery of this host with 64 veth pairs
// beside its own links, as on a node whose pods' veths come and go: a
// discovery reruns on their link events, and each reads every link of the
// host (the link and route dumps, ethtool, the XDP features).
func BenchmarkDiscoverLive(b *testing.B) {
	for i := range 64 {
		netnstest.Veth(b, fmt.Sprintf("%sd%da", benchPrefix, i), fmt.Sprintf("%sd%db", benchPrefix, i))
	}
	d, err := devices.New(devices.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Discover(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}
