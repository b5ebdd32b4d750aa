package devices

import (
	"reflect"
	"testing"

	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

// On a machine of two sockets split in two NUMA nodes each, a device on a
// node is near that node first and the other node of its socket, not the
// other socket's; a machine without NUMA nodes has no lists.
func TestNUMANodeLists(t *testing.T) {
	root := t.TempDir()
	if err := (sysfsfixture.Tree{NUMA: sysfsfixture.SubNUMA()}).Write(root); err != nil {
		t.Fatal(err)
	}
	got, err := NUMANodeLists(root)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64][]int64{0: {0, 1}, 1: {1, 0}, 2: {2, 3}, 3: {3, 2}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NUMANodeLists = %v, want %v", got, want)
	}

	got, err = NUMANodeLists(t.TempDir())
	if err != nil || len(got) != 0 {
		t.Errorf("NUMANodeLists of a machine without NUMA nodes = %v, %v; want none", got, err)
	}
}
