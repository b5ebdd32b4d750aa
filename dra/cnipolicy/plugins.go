package cnipolicy

import "strings"

// deviceFields are the fields of the reference plugins' configurations
// that name a device of the host rather than of the pod: an interface to
// take or attach to (host-device's device, hwaddr, kernelpath, pciBusID
// and deviceID; macvlan, ipvlan and vlan's master; bridge's bridge),
// whatever the plugin.
var deviceFields = []string{"bridge", "device", "deviceID", "hwaddr", "kernelpath", "master", "pciBusID"}

// pathSuffixes end the names of fields that name files of the host
// (host-local's dataDir, resolvConf, a socket path).
var pathSuffixes = []string{"dir", "path", "file", "socket", "conf"}

// deviceField is the device field a key sets, if any.
func deviceField(key string) (string, bool) {
	f := Fold(key)
	for _, d := range deviceFields {
		if Fold(d) == f {
			return d, true
		}
	}
	return "", false
}

// isPathField says whether a key names a file of the host.
func isPathField(key string) bool {
	f := Fold(key)
	for _, s := range pathSuffixes {
		if strings.HasSuffix(f, Fold(s)) {
			return true
		}
	}
	return false
}

// A defaultRef is a field whose default is an object of the host.
type defaultRef struct {
	field string
	kind  Kind
	value string
}

// pluginFacts are what a reference plugin does that its configuration
// need not say.
type pluginFacts struct {
	// defaults are the fields that, left out, take an object of the host.
	defaults []defaultRef
	// hostOptions are the options that, on, change the host: a field, or
	// a dotted path of fields ("runtimeConfig.portMappings").
	hostOptions []string
	// sysctls: its sysctl map is written under /proc/sys.
	sysctls bool
	// masterModes are the values of its field mode that take its master
	// whole, each a host option named as the mode.
	masterModes []masterMode
	// vlanID is its field of the VLAN of its master it makes its
	// interface on; "" for none.
	vlanID string
	// args are the fields it also reads from args.cni (the CNI
	// conventions' arguments, where a pod's cni-args go), whose values
	// there win over the configuration's own; sysctls of both are
	// written.
	args []string
}

// A masterMode is a mode that takes the master whole.
type masterMode struct{ name, why string }

// referencePlugins are the facts of the reference plugins
// (containernetworking/plugins) a tenant's configuration may name.
var referencePlugins = map[string]pluginFacts{
	// macvlan, ipvlan and vlan make their interface on master, the
	// node's default-route interface when left out. A passthru macvlan
	// takes its master whole; a vlan is a VLAN of its master, 0 when
	// vlanId is left out (the plugin makes 802.1Q alone).
	"macvlan": {defaults: []defaultRef{{"master", HostDevice, DefaultRouteLink}},
		masterModes: []masterMode{{"passthru", "a passthru macvlan takes its master whole: the master turns promiscuous, " +
			"its MAC is the pod's to change, and no other macvlan can be made on it"}}},
	"ipvlan": {defaults: []defaultRef{{"master", HostDevice, DefaultRouteLink}}},
	"vlan":   {defaults: []defaultRef{{"master", HostDevice, DefaultRouteLink}}, vlanID: "vlanId"},
	// bridge attaches to (and makes) the bridge cni0 when left out; its
	// options put the gateway address on the bridge and turn on
	// forwarding (isGateway, isDefaultGateway, forceAddress), add NAT
	// rules (ipMasq), and set the host's bridge and ports (hairpinMode,
	// promiscMode, macspoofchk, vlan, vlanTrunk, portIsolation).
	"bridge": {
		defaults: []defaultRef{{"bridge", HostDevice, "cni0"}},
		hostOptions: []string{"isGateway", "isDefaultGateway", "forceAddress", "ipMasq", "hairpinMode",
			"promiscMode", "macspoofchk", "vlan", "vlanTrunk", "portIsolation"},
	},
	// tuning writes its sysctls under /proc/sys in the pod's network
	// namespace, where only net.* is the pod's; promisc and allmulti on
	// the pod's interface reach the host device under it (the kernel
	// passes both from a macvlan, ipvlan or vlan interface to its
	// master). It reads each of these from args.cni too.
	"tuning": {sysctls: true, hostOptions: []string{"promisc", "allmulti"},
		args: []string{"sysctl", "mac", "promisc", "mtu", "allmulti"}},
	// portmap forwards the node's ports (runtimeConfig.portMappings, the
	// capability portMappings) to the pod, whatever else listens on them,
	// with iptables rules of the node that its conditions and mark chain
	// shape.
	"portmap": {hostOptions: []string{"runtimeConfig.portMappings", "conditionsV4", "conditionsV6", "externalSetMarkChain"}},
}

// MakesOnMaster says whether a plugin of type typ makes its interface on
// a master, which it takes from the node (its default-route interface)
// when the configuration leaves master out (LeftOut).
func MakesOnMaster(typ string) bool {
	for _, d := range referencePlugins[typ].defaults {
		if d.field == "master" {
			return true
		}
	}
	return false
}

// LeftOut says whether the plugin takes its default for field: the
// configuration leaves it out, or sets it to null or "" (the plugin reads
// "" either way).
func LeftOut(conf map[string]any, field string) bool {
	_, val, _ := Get(conf, field)
	return val == nil || val == ""
}
