package devices

import "fmt"

// Health is what discovery can tell of a device's health. The zero value is
// healthy; Reason is a short CamelCase word (a label value), Message says
// it for people.
type Health struct {
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Healthy reports whether nothing is wrong.
func (h Health) Healthy() bool { return h.Reason == "" }

// Reasons a device is unhealthy, as discovery sees it.
const (
	// ReasonPFLinkDown: the VF's PF has lost its link.
	ReasonPFLinkDown = "PFLinkDown"
	// ReasonMemifNotAnswering: the memif endpoint does not answer HELLO.
	ReasonMemifNotAnswering = "MemifNotAnswering"
)

// linkDown are the operational states of a link that carries nothing.
var linkDown = map[string]bool{"down": true, "lowerlayerdown": true, "notpresent": true}

// assessHealth sets the health of each device from what discovery saw:
// VFs of a PF whose link is down, memif endpoints that do not answer.
func assessHealth(devs []Device) {
	pfs := map[string]*Netdev{}
	for _, d := range devs {
		if d.PF != nil && d.PCI != nil && d.Netdev != nil {
			pfs[d.PCI.Address] = d.Netdev
		}
	}
	for i := range devs {
		d := &devs[i]
		switch {
		case d.VF != nil:
			if pf, ok := pfs[d.VF.PFPCIAddress]; ok && linkDown[pf.OperState] {
				d.Health = Health{Reason: ReasonPFLinkDown, Message: fmt.Sprintf("the link of PF %s (%s) is %s", pf.Name, d.VF.PFPCIAddress, pf.OperState)}
			}
		case d.Memif != nil && !d.Memif.Healthy:
			d.Health = Health{Reason: ReasonMemifNotAnswering, Message: fmt.Sprintf("memif endpoint %s does not answer HELLO: %s", d.Memif.SocketPath, d.Memif.Problem)}
		}
	}
}
