package npwg

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// maxInterfaceName is IFNAMSIZ less the terminating NUL.
const maxInterfaceName = 15

// ValidInterfaceName says why name cannot be the name of a Linux network
// interface, or nil. The rules are the kernel's (dev_valid_name): 1 to 15
// bytes, not "." or "..", and no '/', ':' or whitespace; a NUL would cut
// the name short, so it is refused too. Names a pod already has ("lo",
// the cluster default network's interface) are AssignInterfaces' concern.
func ValidInterfaceName(name string) error {
	switch {
	case name == "":
		return errors.New("must not be empty")
	case len(name) > maxInterfaceName:
		return fmt.Errorf("must be at most %d bytes, not %d", maxInterfaceName, len(name))
	case name == "." || name == "..":
		return errors.New(`must not be "." or ".."`)
	}
	for i := 0; i < len(name); i++ {
		switch name[i] {
		case '/', ':':
			return errors.New("must not contain '/' or ':'")
		case ' ', '\t', '\n', '\v', '\f', '\r':
			return errors.New("must not contain whitespace")
		case 0xa0:
			// The kernel's isspace() is true of Latin-1's no-break
			// space, a byte of many UTF-8 characters.
			return errors.New("must not contain the byte 0xa0, which the kernel takes for whitespace (it is part of characters such as à)")
		case 0:
			return errors.New("must not contain a NUL byte")
		}
	}
	return nil
}

// parseIPRequest reads an address with an optional prefix length, as the
// "ips" key has them (10.2.2.42/24, 2001:db8::5).
func parseIPRequest(s string) (netip.Addr, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Addr{}, errors.New("must be an IPv4 or IPv6 address with an optional prefix length, like 10.2.2.42/24 or 2001:db8::5/64")
		}
		return p.Addr(), nil
	}
	return parseIP(s)
}

// parseIP reads a plain IPv4 or IPv6 address, without a zone.
func parseIP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return netip.Addr{}, errors.New("must be an IPv4 or IPv6 address, like 10.0.0.1 or 2001:db8::1")
	case a.Zone() != "":
		return netip.Addr{}, errors.New("must not have a zone (%name)")
	}
	return a, nil
}

// parseMAC reads a 6-byte Ethernet address an interface can take: unicast
// and not all zeros (the kernel refuses others). It returns the canonical
// form (lower case, colons).
func parseMAC(s string) (string, error) {
	hw, err := net.ParseMAC(s)
	switch {
	case err != nil:
		return "", errors.New("must be a MAC address, like 02:23:45:67:89:01")
	case len(hw) != 6:
		return "", fmt.Errorf("must be a 6-byte Ethernet MAC address, not %d bytes", len(hw))
	case hw[0]&1 != 0:
		return "", errors.New("must be a unicast address (the lowest bit of the first byte clear)")
	case hw.String() == "00:00:00:00:00:00":
		return "", errors.New("must not be all zeros")
	}
	return hw.String(), nil
}

// parseGUID reads an 8-byte InfiniBand GUID (the lower 8 bytes of an
// IP-over-InfiniBand hardware address, RFC 4391 9.1.1) and returns its
// canonical form.
func parseGUID(s string) (string, error) {
	hw, err := net.ParseMAC(s)
	switch {
	case err != nil:
		return "", errors.New("must be an InfiniBand GUID of 8 bytes, like 24:8a:07:03:00:8d:ae:2f")
	case len(hw) != 8:
		return "", fmt.Errorf("must be an InfiniBand GUID of 8 bytes, not %d bytes", len(hw))
	}
	return hw.String(), nil
}
