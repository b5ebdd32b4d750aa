package dataplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Added says whether ADD of n completed: libcni cached its result, and the
// interface is in the namespace. It returns the result then. A network
// whose ADD was interrupted (the process killed) has no cached result, or
// one cut short, or no interface, and needs DEL before another ADD.
func (c *CNI) Added(_ context.Context, n CNINetwork) (CNIResult, bool, error) {
	list, rt, err := n.parse()
	if err != nil {
		return CNIResult{}, false, err
	}
	res, err := c.cfg.GetNetworkListCachedResult(list, rt)
	if err != nil || res == nil {
		// No result cached, or one that cannot be read: libcni writes it
		// after the plugins' ADD, in place, so a daemon killed then leaves
		// it cut short. Either way ADD's end was not recorded; DEL, which
		// drops an unreadable cache entry, cleans up before ADD again.
		return CNIResult{}, false, nil
	}
	ns, err := netns.GetFromPath(n.NetNS)
	if err != nil {
		return CNIResult{}, false, nil // the sandbox is gone: nothing is in place
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return CNIResult{}, false, fmt.Errorf("netlink in %s: %w", n.NetNS, err)
	}
	defer h.Close()
	var notFound netlink.LinkNotFoundError
	if _, err := h.LinkByName(n.IfName); errors.As(err, &notFound) {
		return CNIResult{}, false, nil
	} else if err != nil {
		return CNIResult{}, false, fmt.Errorf("look for %s in %s: %w", n.IfName, n.NetNS, err)
	}
	r, err := newCNIResult(res)
	return r, err == nil, err
}
