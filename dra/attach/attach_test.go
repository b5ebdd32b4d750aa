package attach

import (
	"testing"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// TestNetdevMACFromPF: the attach plan says the PF set the MAC only when
// Prepare had the PF set the pod interface's MAC as the VF's.
func TestNetdevMACFromPF(t *testing.T) {
	dev := func(vfMAC, podMAC string, vf bool) claims.Device {
		d := claims.Device{Host: &claims.HostNetdev{Name: "ens1f0v0", MAC: "02:00:00:00:00:aa"},
			Pod: &claims.PodInterface{Name: "net1", MAC: podMAC}}
		if vf {
			d.VF = &claims.VF{PFName: "ens1f0", Set: claims.VFSettings{MAC: vfMAC}}
		}
		return d
	}
	for _, tc := range []struct {
		name string
		dev  claims.Device
		want bool
	}{
		{"the PF set the pod's MAC", dev("02:00:00:00:00:01", "02:00:00:00:00:01", true), true},
		{"the same MAC in capitals", dev("02:00:00:00:00:0A", "02:00:00:00:00:0a", true), true},
		{"a VF without a MAC", dev("", "", true), false},
		{"a VF with no MAC set through the PF", dev("", "02:00:00:00:00:01", true), false},
		{"not a VF", dev("", "02:00:00:00:00:01", false), false},
	} {
		nd, ok := Netdev(tc.dev)
		if !ok || nd.MACFromPF != tc.want {
			t.Errorf("%s: MACFromPF = %v (%v), want %v", tc.name, nd.MACFromPF, ok, tc.want)
		}
	}
}
