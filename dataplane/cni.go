package dataplane

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/libcni"
	cnitypes "github.com/containernetworking/cni/pkg/types"
	cni100 "github.com/containernetworking/cni/pkg/types/100"
)

// CNI runs CNI plugin chains through libcni, as a container runtime does:
// ADD with the pod's network namespace and the interface name, DEL with
// the result libcni cached at ADD.
type CNI struct{ cfg *libcni.CNIConfig }

// NewCNI runs plugins from binDirs, at most as many at once as limit
// allows (nil: any number), and caches results in cacheDir.
func NewCNI(binDirs []string, cacheDir string, limit *CNILimit) *CNI {
	return &CNI{cfg: libcni.NewCNIConfigWithCacheDir(binDirs, cacheDir, newExec(limit))}
}

// CNINetwork is one network of a pod: a conflist and where it goes.
type CNINetwork struct {
	Conflist    []byte // with name and cniVersion
	ContainerID string // the pod sandbox's ID
	NetNS       string
	IfName      string
	// Args are CNI_ARGS, e.g. K8S_POD_NAMESPACE.
	Args [][2]string
	// CapabilityArgs are runtimeConfig values, given to the plugins that
	// declare their capability.
	CapabilityArgs map[string]any
}

func (n CNINetwork) parse() (*libcni.NetworkConfigList, *libcni.RuntimeConf, error) {
	list, err := libcni.ConfListFromBytes(n.Conflist)
	if err != nil {
		return nil, nil, fmt.Errorf("CNI config: %w", err)
	}
	return list, &libcni.RuntimeConf{ContainerID: n.ContainerID, NetNS: n.NetNS, IfName: n.IfName, Args: n.Args, CapabilityArgs: n.CapabilityArgs}, nil
}

// CNIResult is an ADD's result: as the plugins returned it (in the
// conflist's cniVersion) and in the current form, to read.
type CNIResult struct {
	Raw     json.RawMessage
	Current *cni100.Result
}

// Add runs ADD and returns its result.
func (c *CNI) Add(ctx context.Context, n CNINetwork) (CNIResult, error) {
	list, rt, err := n.parse()
	if err != nil {
		return CNIResult{}, err
	}
	res, err := c.cfg.AddNetworkList(ctx, list, rt)
	if err != nil {
		return CNIResult{}, err
	}
	return newCNIResult(res)
}

// Del runs DEL with the result cached at ADD. DEL of what was never added,
// or was deleted already, is not an error for conforming plugins.
func (c *CNI) Del(ctx context.Context, n CNINetwork) error {
	list, rt, err := n.parse()
	if err != nil {
		return err
	}
	return c.cfg.DelNetworkList(ctx, list, rt)
}

// newCNIResult is a plugin's result as it was written and in the current
// version.
func newCNIResult(res cnitypes.Result) (CNIResult, error) {
	raw, err := json.Marshal(res)
	if err != nil {
		return CNIResult{}, fmt.Errorf("CNI result: %w", err)
	}
	cur, err := cni100.NewResultFromResult(res)
	if err != nil {
		return CNIResult{}, fmt.Errorf("CNI result: %w", err)
	}
	return CNIResult{Raw: raw, Current: cur}, nil
}
