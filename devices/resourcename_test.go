package devices

import (
	"errors"
	"testing"
)

// The operator's resource names go to the devices their filters admit,
// the first that admits one naming it; the others keep their kind's
// default; the name is the attribute k8s.cni.cncf.io/resourceName.
// Malformed names and filters are bad options.
func TestResourceNames(t *testing.T) {
	inv := discover(t, Options{SysfsRoot: fixture("e810"), ResourceNames: []ResourceName{
		{Name: "intel.com/vf_first", Filter: `device.attributes["fastpath.dev"].kind == "sriov-vf" && device.attributes["fastpath.dev"].vfID == 0`},
		{Name: "intel.com/vf", Filter: `device.attributes["fastpath.dev"].kind == "sriov-vf"`},
	}})
	seen := map[string]int{}
	for _, d := range inv.Devices {
		if d.Kind == KindMemif {
			continue
		}
		want := DefaultResourceName(d.Kind)
		if d.VF != nil {
			want = "intel.com/vf"
			if d.VF.ID == 0 {
				want = "intel.com/vf_first"
			}
		}
		attr := d.Attributes()[AttributeMultusResourceName].StringValue
		if d.ResourceName != want || attr == nil || *attr != want {
			t.Errorf("%s: resource name %q (attribute %v), want %q", d.Name, d.ResourceName, attr, want)
		}
		seen[want]++
	}
	if seen["intel.com/vf_first"] == 0 || seen["intel.com/vf"] == 0 || seen[DefaultResourceName(KindNIC)] == 0 {
		t.Errorf("resource names given %v: want each of the operator's and the PF's default", seen)
	}

	for _, bad := range []ResourceName{
		{Name: "sriov", Filter: "true"},
		{Name: "intel.com/sriov net", Filter: "true"},
		{Name: "intel.com/sriov", Filter: ""},
		{Name: "intel.com/sriov", Filter: "device.nope("},
	} {
		if _, err := New(withCEL(Options{SysfsRoot: fixture("e810"), ResourceNames: []ResourceName{bad}})); !errors.Is(err, ErrBadOptions) {
			t.Errorf("resource name %+v: error %v, want a bad option", bad, err)
		}
	}
}
