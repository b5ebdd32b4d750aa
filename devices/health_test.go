package devices

import (
	"strings"
	"testing"
)

func TestAssessHealth(t *testing.T) {
	devs := []Device{
		{Name: "pf", PCI: &PCI{Address: "0000:3b:00.0"}, PF: &PF{NumVFs: 2}, Netdev: &Netdev{Name: "ens1f0", OperState: "down"}},
		{Name: "vf0", PCI: &PCI{Address: "0000:3b:01.0"}, VF: &VF{PFPCIAddress: "0000:3b:00.0", PFName: "ens1f0"}},
		{Name: "pf2", PCI: &PCI{Address: "0000:3c:00.0"}, PF: &PF{NumVFs: 1}, Netdev: &Netdev{Name: "ens2f0", OperState: "up"}},
		{Name: "vf1", PCI: &PCI{Address: "0000:3c:01.0"}, VF: &VF{PFPCIAddress: "0000:3c:00.0", PFName: "ens2f0"}},
		{Name: "fw", Memif: &Memif{Role: MemifRoleSlave, SocketPath: "/run/fw.sock", Problem: "connection refused"}},
		{Name: "vpp", Memif: &Memif{Role: MemifRoleMaster, Healthy: true}},
	}
	assessHealth(devs)
	got := map[string]Health{}
	for _, d := range devs {
		got[d.Name] = d.Health
	}
	if h := got["vf0"]; h.Reason != ReasonPFLinkDown || !strings.Contains(h.Message, "ens1f0 (0000:3b:00.0) is down") {
		t.Errorf("VF of a PF whose link is down: %+v", h)
	}
	if h := got["fw"]; h.Reason != ReasonMemifNotAnswering || !strings.Contains(h.Message, "connection refused") {
		t.Errorf("memif endpoint not answering: %+v", h)
	}
	for _, name := range []string{"pf", "pf2", "vf1", "vpp"} {
		if !got[name].Healthy() {
			t.Errorf("%s: %+v, want healthy", name, got[name])
		}
	}
}
