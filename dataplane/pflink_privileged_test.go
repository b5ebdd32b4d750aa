//go:build privileged

package dataplane

import (
	"strings"
	"testing"
)

// TestPFLinks: the MTU and state of a host netdev (a veth standing in for
// a PF) are read back as set; a netdev that is not there is named.
func TestPFLinks(t *testing.T) {
	requireRoot(t)
	name, _ := newVeth(t)
	var l PFLinks
	if err := l.SetMTU(name, 9000); err != nil {
		t.Fatal(err)
	}
	if err := l.SetUp(name, true); err != nil {
		t.Fatal(err)
	}
	if mtu, up, err := l.Link(name); err != nil || mtu != 9000 || !up {
		t.Errorf("after MTU 9000 and up: MTU %d, up %t, %v", mtu, up, err)
	}
	if err := l.SetUp(name, false); err != nil {
		t.Fatal(err)
	}
	if _, up, err := l.Link(name); err != nil || up {
		t.Errorf("after down: up %t, %v", up, err)
	}
	if err := l.SetMTU("fpvnone0", 1500); err == nil || !strings.Contains(err.Error(), "fpvnone0") {
		t.Errorf("a netdev that is not there: %v, want an error naming it", err)
	}
}
