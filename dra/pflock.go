package dra

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// A PF's VFs change (a FastpathNodeConfig writes its sriov_numvfs) only
// while no claim holds the PF or one of its VFs, and a claim is admitted
// on them only while they are as Prepare read them: both hold the PF's
// lock, the node's configuration across its look at the claims and its
// change, Prepare across its reading of the devices and its admission to
// the store. Either the claim is recorded before the look, which sees it
// and leaves the VFs as they are, or Prepare reads the VFs after the
// change, and refuses one that is gone.
//
// The lock is the store's lock of a key no claim has (pfKey): node-wide
// when the store is shared, as during a rolling update.

// pfKey is the key of the lock of the PF at PCI address pf.
func pfKey(pf string) claims.Key {
	return claims.Key{Driver: "pf", UID: types.UID(pf)}
}

// TryLockPF takes the lock of the PF at PCI address pf if no Prepare holds
// it now, and returns its release; ok is false when one does.
func TryLockPF(store *claims.Store, pf string) (unlock func(), ok bool) {
	// A lock that is free is taken whether the context has ended or not;
	// one that is held is not waited for.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	unlock, err := store.LockContext(ctx, pfKey(pf))
	return unlock, err == nil
}

// lockPFs takes the locks of the PFs of c's devices (a VF's PF, a PF
// claimed whole), in order, waiting for them until ctx ends, and returns
// their release.
func (d *Driver) lockPFs(ctx context.Context, c *claims.Claim) (unlock func(), _ error) {
	var pfs []string
	for _, dev := range c.Devices {
		if pf := cmp.Or(dev.PFPCIAddress, dev.PCIAddress); pf != "" {
			pfs = append(pfs, pf)
		}
	}
	slices.Sort(pfs)
	var held []func()
	unlock = func() {
		for _, u := range slices.Backward(held) {
			u()
		}
	}
	for _, pf := range slices.Compact(pfs) {
		u, err := d.opts.Store.LockContext(ctx, pfKey(pf))
		if err != nil {
			unlock()
			return nil, fmt.Errorf("claim %s: PF %s: %w", c, pf, err)
		}
		held = append(held, u)
	}
	return unlock, nil
}
