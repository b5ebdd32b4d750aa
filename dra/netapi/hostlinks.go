package netapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// hostLinkConf is what a plugin's configuration says of the host
// interface it takes, decoded as the plugins decode it (encoding/json, so
// "Master" is master too).
type hostLinkConf struct {
	Master string `json:"master"`
	Device string `json:"device"`
	// LinkInContainer: the master is in the pod's network namespace,
	// not the host's.
	LinkInContainer bool `json:"linkInContainer"`
}

// hostLink is the field of a plugin's configuration that names an
// interface of the host's network namespace, and the interface: the
// master of macvlan, ipvlan and vlan (unless it is in the pod's network
// namespace), host-device's device; "" when the plugin names none (a
// macvlan without master takes the default route's interface; a
// host-device may name its device by hwaddr, kernelpath or pciBusID).
func hostLink(typ string, conf []byte) (field, name string) {
	var c hostLinkConf
	// A configuration that does not decode is its plugin's to refuse.
	if json.Unmarshal(conf, &c) != nil {
		return "", ""
	}
	switch typ {
	case "macvlan", "ipvlan", "vlan":
		if c.LinkInContainer {
			return "", ""
		}
		return "master", c.Master
	case "host-device":
		return "device", c.Device
	}
	return "", ""
}

// hostLinkProblems says, for each plugin of list that names a host
// interface (hostLink) that is not in the daemon's network namespace (the
// host's), what is missing, e.g. "macvlan: master ens1f0: no such
// interface on this node".
func hostLinkProblems(list *libcni.NetworkConfigList) []string {
	var problems []string
	for _, p := range list.Plugins {
		field, name := hostLink(p.Network.Type, p.Bytes)
		if name == "" {
			continue
		}
		if err := hostLinkExists(name); errors.Is(err, errNoSuchLink) {
			problems = append(problems, fmt.Sprintf("%s: %s %s: no such interface on this node", p.Network.Type, field, name))
		} else if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s %s: %v", p.Network.Type, field, name, err))
		}
	}
	return problems
}

// errNoSuchLink: the daemon's network namespace has no interface of that
// name.
var errNoSuchLink = errors.New("no such interface")

// hostLinkExists is nil when the daemon's network namespace has the
// interface name, errNoSuchLink when not. A name no interface can have
// (longer than IFNAMSIZ, or with a slash) is asked of no one.
func hostLinkExists(name string) error {
	if len(name) >= unix.IFNAMSIZ || strings.ContainsRune(name, '/') {
		return errNoSuchLink
	}
	var notFound netlink.LinkNotFoundError
	if _, err := netlink.LinkByName(name); errors.As(err, &notFound) {
		return errNoSuchLink
	} else if err != nil {
		return fmt.Errorf("look up interface %s: %w", name, err)
	}
	return nil
}
