package devices

import (
	"path/filepath"
)

// link is what discovery needs to know of a kernel network interface.
type link struct {
	Index       int
	Name        string
	MAC         string
	MTU         int
	MinMTU      int
	MaxMTU      int
	OperState   string
	Alias       string
	Kind        string // netlink link kind: veth, macvlan, bond, ... ("" for hardware)
	ParentIndex int
	MasterIndex int
	Loopback    bool
}

// sysfsLink reads an interface's state from class/net/<name>/ files, as
// discovery does below a fixture root where netlink cannot look.
func sysfsLink(s sysfs, name string) (link, error) {
	dir := s.path("class", "net", name)
	l := link{Name: name}
	var err error
	if l.MAC, err = readTrimmed(filepath.Join(dir, "address")); err != nil {
		return link{}, err
	}
	if l.MTU, err = readInt(filepath.Join(dir, "mtu")); err != nil {
		return link{}, err
	}
	if l.Index, err = readOptionalInt(filepath.Join(dir, "ifindex"), 0); err != nil {
		return link{}, err
	}
	l.OperState, _ = readTrimmed(filepath.Join(dir, "operstate"))
	l.Alias, _ = readTrimmed(filepath.Join(dir, "ifalias"))
	return l, nil
}

// sysfsSpeed reads class/net/<name>/speed; the kernel reports -1 (or fails
// the read) when the link is down or the speed unknown.
func sysfsSpeed(s sysfs, name string) int {
	v, err := readInt(s.path("class", "net", name, "speed"))
	if err != nil || v < 0 {
		return 0
	}
	return v
}

func (l link) netdev() *Netdev {
	return &Netdev{
		Name: l.Name, MAC: l.MAC, MTU: l.MTU, MinMTU: l.MinMTU, MaxMTU: l.MaxMTU,
		OperState: l.OperState, Alias: l.Alias, LinkType: l.Kind,
	}
}
