package devices

import (
	"fmt"
	"strings"
	"sync"

	"github.com/jaypipes/pcidb"
)

// modalias is a PCI function's identity as the kernel writes it to sysfs:
// pci:v<vendor>d<device>sv<subvendor>sd<subdevice>bc<class>sc<subclass>i<interface>
// with 8 hex digits per ID, of which PCI uses the low 4.
type modalias struct {
	vendor, device, subVendor, subDevice, class string
}

func parseModalias(s string) (modalias, bool) {
	var m modalias
	rest, ok := strings.CutPrefix(s, "pci:")
	for _, f := range []struct {
		tag   string
		width int
		dst   *string
	}{{"v", 8, &m.vendor}, {"d", 8, &m.device}, {"sv", 8, &m.subVendor}, {"sd", 8, &m.subDevice}, {"bc", 2, &m.class}, {"sc", 2, nil}, {"i", 2, nil}} {
		if !ok {
			return modalias{}, false
		}
		if rest, ok = strings.CutPrefix(rest, f.tag); !ok || len(rest) < f.width || !isHex(rest[:f.width]) {
			return modalias{}, false
		}
		if f.dst != nil {
			*f.dst = strings.ToLower(rest[f.width-min(f.width, 4) : f.width])
		}
		rest = rest[f.width:]
	}
	if rest != "" {
		return modalias{}, false
	}
	return m, true
}

func isHex(s string) bool {
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return true
}

// pciNames names PCI vendors and devices from the pci.ids database. The
// database is about 5 MiB once parsed, and a node has a handful of distinct
// IDs, so it is loaded only when an ID not seen before turns up, the names
// needed are kept, and the rest is let go.
type pciNames struct {
	load func() (*pcidb.PCIDB, error)

	mu      sync.Mutex
	vendors map[string]string // vendor ID -> name, "" when unknown
	devices map[string]string // vendor ID + device ID -> name, "" when unknown
}

func newPCINames() *pciNames {
	return &pciNames{
		load:    func() (*pcidb.PCIDB, error) { return pcidb.New() },
		vendors: map[string]string{},
		devices: map[string]string{},
	}
}

// resolve makes sure every ID of ids has a name (maybe "") cached.
func (n *pciNames) resolve(ids []modalias) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var db *pcidb.PCIDB
	for _, m := range ids {
		_, haveVendor := n.vendors[m.vendor]
		_, haveDevice := n.devices[m.vendor+m.device]
		if haveVendor && haveDevice {
			continue
		}
		if db == nil {
			var err error
			if db, err = n.load(); err != nil {
				return fmt.Errorf("load the PCI ID database (is pci.ids installed?): %w", err)
			}
		}
		if v := db.Vendors[m.vendor]; v != nil {
			n.vendors[m.vendor] = v.Name
		} else {
			n.vendors[m.vendor] = ""
		}
		if p := db.Products[m.vendor+m.device]; p != nil {
			n.devices[m.vendor+m.device] = p.Name
		} else {
			n.devices[m.vendor+m.device] = ""
		}
	}
	return nil
}

// names returns the cached vendor and device names of m.
func (n *pciNames) names(m modalias) (vendor, device string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.vendors[m.vendor], n.devices[m.vendor+m.device]
}
