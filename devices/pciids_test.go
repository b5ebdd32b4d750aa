package devices

import (
	"errors"
	"testing"

	"github.com/jaypipes/pcidb"
)

func TestParseModalias(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want modalias
		ok   bool
	}{
		{"pci:v00008086d00001889sv00008086sd00000000bc02sc00i00", modalias{"8086", "1889", "8086", "0000", "02"}, true},
		{"pci:v000015B3d0000101Esv000015B3sd00000000bc02sc00i00", modalias{"15b3", "101e", "15b3", "0000", "02"}, true},
		{"pci:v00008086d00001889sv00008086sd00000000bc02sc00", modalias{}, false},     // no interface
		{"pci:v00008086d00001889sv00008086sd00000000bc02sc00i00x", modalias{}, false}, // trailing garbage
		{"pci:v0000808Gd00001889sv00008086sd00000000bc02sc00i00", modalias{}, false},  // not hex
		{"usb:v1D6Bp0002d0606dc09dsc00dp01ic09isc00ip00in00", modalias{}, false},
		{"", modalias{}, false},
	} {
		got, ok := parseModalias(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseModalias(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// The PCI ID database is read only when an ID turns up whose names are not
// known yet, and a failure to read it is retried next time.
func TestPCINamesLoadOnDemand(t *testing.T) {
	loads := 0
	fail := true
	n := newPCINames()
	n.load = func() (*pcidb.PCIDB, error) {
		loads++
		if fail {
			return nil, errors.New("no pci.ids")
		}
		return &pcidb.PCIDB{
			Vendors:  map[string]*pcidb.Vendor{"8086": {ID: "8086", Name: "Intel Corporation"}},
			Products: map[string]*pcidb.Product{"80861889": {ID: "1889", Name: "Ethernet Adaptive Virtual Function"}},
		}, nil
	}
	vf := modalias{vendor: "8086", device: "1889", class: "02"}
	other := modalias{vendor: "1af4", device: "1041", class: "02"}

	if err := n.resolve([]modalias{vf}); err == nil {
		t.Fatal("resolve with a missing database: no error")
	}
	fail = false
	for range 3 {
		if err := n.resolve([]modalias{vf, vf}); err != nil {
			t.Fatal(err)
		}
	}
	if loads != 2 {
		t.Errorf("database loaded %d times for one ID after one failure, want 2", loads)
	}
	if v, d := n.names(vf); v != "Intel Corporation" || d != "Ethernet Adaptive Virtual Function" {
		t.Errorf("names = %q, %q", v, d)
	}
	if err := n.resolve([]modalias{vf, other}); err != nil {
		t.Fatal(err)
	}
	if err := n.resolve([]modalias{other}); err != nil {
		t.Fatal(err)
	}
	if loads != 3 {
		t.Errorf("database loaded %d times, want 3 (once more for the new ID, not again for an ID it does not name)", loads)
	}
	if v, d := n.names(other); v != "" || d != "" {
		t.Errorf("names of an ID the database lacks = %q, %q, want empty", v, d)
	}
}
