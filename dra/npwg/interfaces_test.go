package npwg

import (
	"reflect"
	"strings"
	"testing"
)

func interfaces(atts []Attachment) []string {
	var names []string
	for _, a := range atts {
		names = append(names, a.InterfaceRequest)
	}
	return names
}

func TestAssignInterfaces(t *testing.T) {
	for name, tc := range map[string]struct {
		value string
		taken map[string]bool
		want  []string
	}{
		// §4.2.2: each attachment to net-a is an attachment of its own.
		"the same network twice":                  {value: "net-a,net-a", want: []string{"net1", "net2"}},
		"around a name asked for":                 {value: "net-a,net-b@net1,net-c", want: []string{"net2", "net1", "net3"}},
		"around names taken by claims":            {value: "net-a,net-a", taken: map[string]bool{"net1": true, "eth0": true, "net3": true}, want: []string{"net2", "net4"}},
		"a name not taken":                        {value: "net-a", taken: map[string]bool{"net1": false}, want: []string{"net1"}},
		"names asked for only":                    {value: "net-a@data,other/net-b@storage", want: []string{"data", "storage"}},
		"a name asked for that claims do not use": {value: "net-a@net7,net-b", taken: map[string]bool{"net1": true}, want: []string{"net7", "net2"}},
	} {
		t.Run(name, func(t *testing.T) {
			atts, errs := ParseNetworks(podNS, tc.value)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if err := AssignInterfaces(atts, tc.taken); err != nil {
				t.Fatal(err)
			}
			if got := interfaces(atts); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("interfaces %q, want %q", got, tc.want)
			}
			elems := strings.Split(tc.value, ",")
			for i, a := range atts {
				if a.GeneratedInterface == strings.Contains(elems[i], "@") {
					t.Errorf("%s as %s: generated %v", elems[i], a.InterfaceRequest, a.GeneratedInterface)
				}
			}
		})
	}
}

func TestAssignInterfacesConflicts(t *testing.T) {
	for name, tc := range map[string]struct {
		atts  []Attachment
		taken map[string]bool
		want  string
	}{
		"a name a claim has": {
			atts:  []Attachment{att(0, podNS, "net-a"), att(1, podNS, "net-b", func(a *Attachment) { a.InterfaceRequest = "net1" })},
			taken: map[string]bool{"net1": true},
			want:  `metadata.annotations[k8s.v1.cni.cncf.io/networks][1].interface: Invalid value: "net1": the pod has an interface of this name already (the loopback, the cluster default network's, or a DRA claim's); ask network my-namespace/net-b for another`,
		},
		"the cluster default network's": {
			atts:  []Attachment{att(0, podNS, "net-a", func(a *Attachment) { a.InterfaceRequest = "eth0" })},
			taken: map[string]bool{"eth0": true},
			want:  `[0].interface: Invalid value: "eth0": the pod has an interface of this name already`,
		},
		"the loopback": {
			atts: []Attachment{att(0, podNS, "net-a", func(a *Attachment) { a.InterfaceRequest = "lo" })},
			want: `[0].interface: Invalid value: "lo"`,
		},
		"one name for two attachments made by hand": {
			atts: []Attachment{
				att(0, podNS, "net-a", func(a *Attachment) { a.InterfaceRequest = "x" }),
				att(1, "other", "net-b", func(a *Attachment) { a.InterfaceRequest = "x" }),
			},
			want: `[1].interface: Duplicate value: "x": element [0] (network my-namespace/net-a) asks for this interface name too`,
		},
		"a name that is not one": {
			atts: []Attachment{att(0, podNS, "net-a", func(a *Attachment) { a.InterfaceRequest = "a/b" })},
			want: `[0].interface: Invalid value: "a/b": a Linux interface name must not contain '/' or ':'`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			before := interfaces(tc.atts)
			if errs := CheckInterfaces(tc.atts, tc.taken); len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want) {
				t.Errorf("CheckInterfaces: %v, want %q", errs, tc.want)
			}
			err := AssignInterfaces(tc.atts, tc.taken)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
			if got := interfaces(tc.atts); !reflect.DeepEqual(got, before) {
				t.Errorf("a failed assignment changed the interfaces to %q", got)
			}
		})
	}
}

// A second assignment, with more names taken, chooses the generated names
// again and keeps those asked for; taken is not changed.
func TestAssignInterfacesAgain(t *testing.T) {
	atts, errs := ParseNetworks(podNS, "net-a,net-b@data,net-a")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := AssignInterfaces(atts, nil); err != nil {
		t.Fatal(err)
	}
	taken := map[string]bool{"net1": true}
	if err := AssignInterfaces(atts, taken); err != nil {
		t.Fatal(err)
	}
	if got, want := interfaces(atts), []string{"net2", "data", "net3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("interfaces %q, want %q", got, want)
	}
	if len(taken) != 1 {
		t.Errorf("taken changed: %v", taken)
	}
}
