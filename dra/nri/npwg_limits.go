package nri

import (
	"fmt"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// checkLimits refuses a pod whose selected networks (selected with the
// NPWG annotation, podNetworks with the PodNetwork one), or those and its
// DRA claims' interfaces together, are more than the node allows
// (NPWGOptions.Limits): before any of them is read, recorded or added.
func (p *Plugin) checkLimits(pod Pod, selected, podNetworks int) error {
	var claimIfaces int
	for _, c := range p.opts.Store.PodClaims(pod.UID) {
		if c.Driver != claims.DriverNPWG {
			claimIfaces += len(c.InterfaceNames())
		}
	}
	if errs := p.opts.NPWG.Limits.Check(selected, podNetworks, claimIfaces); len(errs) > 0 {
		return fmt.Errorf("pod %s: %w", pod, bounds.Aggregate(errs))
	}
	return nil
}
