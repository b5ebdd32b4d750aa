package dataplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/containernetworking/cni/libcni"
	cnitypes "github.com/containernetworking/cni/pkg/types"
)

// ErrCheckNotSupported: the conflist's cniVersion (before 0.4.0) has no
// CHECK.
var ErrCheckNotSupported = libcni.ErrorCheckNotSupp

// Status runs STATUS for the conflist's plugins, as a runtime does before
// ADD: an error says a plugin cannot add networks now. Conflists of a
// cniVersion before 1.1.0 have no STATUS: nil.
func (c *CNI) Status(ctx context.Context, n CNINetwork) error {
	list, _, err := n.parse()
	if err != nil {
		return err
	}
	return c.cfg.GetStatusNetworkList(ctx, list)
}

// Cached is the result libcni cached at ADD, and whether there is one:
// ADD completed and DEL has not run since (the interface may be gone:
// CHECK says).
func (c *CNI) Cached(_ context.Context, n CNINetwork) (CNIResult, bool, error) {
	list, rt, err := n.parse()
	if err != nil {
		return CNIResult{}, false, err
	}
	res, err := c.cfg.GetNetworkListCachedResult(list, rt)
	if err != nil || res == nil {
		return CNIResult{}, false, err
	}
	r, err := newCNIResult(res)
	return r, err == nil, err
}

// Check runs CHECK with the result cached at ADD: an error says the
// network is not as ADD left it. ErrCheckNotSupported for a cniVersion
// without CHECK.
func (c *CNI) Check(ctx context.Context, n CNINetwork) error {
	list, rt, err := n.parse()
	if err != nil {
		return err
	}
	return c.cfg.CheckNetworkList(ctx, list, rt)
}

// CNIAttachment is a network attachment libcni cached at ADD: the network,
// the sandbox (container ID), the interface, and the conflist it ran.
type CNIAttachment struct {
	Network     string
	ContainerID string
	IfName      string
	NetNS       string
	Conflist    []byte
}

// Attachments are the attachments in the cache: every ADD whose DEL has
// not run.
func (c *CNI) Attachments() ([]CNIAttachment, error) {
	cached, err := c.cfg.GetCachedAttachments("")
	if err != nil {
		return nil, fmt.Errorf("CNI cache: %w", err)
	}
	out := make([]CNIAttachment, 0, len(cached))
	for _, a := range cached {
		out = append(out, CNIAttachment{Network: a.Network, ContainerID: a.ContainerID, IfName: a.IfName, NetNS: a.NetNS, Conflist: a.Config})
	}
	return out, nil
}

// GC runs libcni's garbage collection of one network (conflist): DEL for
// each of its cached attachments but those in valid, then, for a
// cniVersion of 1.1.0 or later, GC of its plugins with valid as the
// attachments still in use (host-local releases the others' addresses).
func (c *CNI) GC(ctx context.Context, conflist []byte, valid []CNIAttachment) error {
	list, err := libcni.ConfListFromBytes(conflist)
	if err != nil {
		return fmt.Errorf("CNI config: %w", err)
	}
	args := &libcni.GCArgs{}
	for _, a := range valid {
		args.ValidAttachments = append(args.ValidAttachments, cnitypes.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName})
	}
	if err := c.cfg.GCNetworkList(ctx, list, args); err != nil {
		return fmt.Errorf("CNI GC of network %s: %w", list.Name, err)
	}
	return nil
}

// CheckNotSupported says whether err is a CHECK the cniVersion lacks.
func CheckNotSupported(err error) bool { return errors.Is(err, ErrCheckNotSupported) }
