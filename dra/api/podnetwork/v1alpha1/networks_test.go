package v1alpha1

import (
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

func TestValidateNetworks(t *testing.T) {
	for name, tc := range map[string]struct {
		nets        []Network
		hostNetwork bool
		want        []string // substrings of the errors, in order; none: valid
	}{
		"the KEP's example": {nets: []Network{
			{PodNetworkName: "default", InterfaceName: "eth0", IsDefaultGW: true},
			{PodNetworkName: "dataplane1", InterfaceName: "net1"},
			{PodNetworkAttachmentName: "my-interface-fast-net", InterfaceName: "net2"},
		}},
		"names left to the implementation": {nets: []Network{{PodNetworkName: "a"}, {PodNetworkName: "b"}}},
		"one PodNetwork twice": {nets: []Network{{PodNetworkName: "a"}, {PodNetworkName: "a", InterfaceName: "net2"}},
			want: []string{`[1].podNetworkName: Duplicate value: "a (a pod references a PodNetwork once; element 0 does)"`}},
		"one attachment twice": {nets: []Network{{PodNetworkAttachmentName: "x"}, {PodNetworkAttachmentName: "x"}},
			want: []string{`[1].podNetworkAttachmentName: Duplicate value`}},
		"a PodNetwork and an attachment of the same name": {nets: []Network{{PodNetworkName: "x"}, {PodNetworkAttachmentName: "x"}}},
		"two default gateways": {nets: []Network{{PodNetworkName: "a", IsDefaultGW: true}, {PodNetworkName: "b", IsDefaultGW: true}},
			want: []string{"[1].isDefaultGW: Invalid value: true: only one network holds the default gateway, and element 0 does"}},
		"one interface twice": {nets: []Network{{PodNetworkName: "a", InterfaceName: "net1"}, {PodNetworkName: "b", InterfaceName: "net1"}},
			want: []string{`[1].interfaceName: Duplicate value: "net1 (as in element 0)"`}},
		"interface name too long": {nets: []Network{{PodNetworkName: "a", InterfaceName: "net123456789abcd"}},
			want: []string{"[0].interfaceName: Invalid value: \"net123456789abcd\": must be at most 15 bytes, not 16"}},
		"interface name with a slash":          {nets: []Network{{PodNetworkName: "a", InterfaceName: "a/b"}}, want: []string{"must not contain '/' or ':'"}},
		"interface name with a colon":          {nets: []Network{{PodNetworkName: "a", InterfaceName: "a:b"}}, want: []string{"must not contain '/' or ':'"}},
		"interface name with a space":          {nets: []Network{{PodNetworkName: "a", InterfaceName: "a b"}}, want: []string{"whitespace"}},
		"interface name with a no-break space": {nets: []Network{{PodNetworkName: "a", InterfaceName: "nà"}}, want: []string{"whitespace"}},
		"interface name dot":                   {nets: []Network{{PodNetworkName: "a", InterfaceName: ".."}}, want: []string{`must not be "." or ".."`}},
		"interface name NUL":                   {nets: []Network{{PodNetworkName: "a", InterfaceName: "a\x00"}}, want: []string{"NUL"}},
		"neither name":                         {nets: []Network{{InterfaceName: "net1"}}, want: []string{"[0]: Required value: one of name (podNetworkName) and attachmentName (podNetworkAttachmentName)"}},
		"both names": {nets: []Network{{PodNetworkName: "a", PodNetworkAttachmentName: "b"}},
			want: []string{"[0].attachmentName: Invalid value: \"b\": only one of name (podNetworkName) and attachmentName (podNetworkAttachmentName) may be set"}},
		"not an object name": {nets: []Network{{PodNetworkName: "Dataplane"}}, want: []string{"[0].podNetworkName: Invalid value: \"Dataplane\": must be a PodNetwork's name"}},
		"host network":       {nets: []Network{{PodNetworkName: "a"}}, hostNetwork: true, want: []string{"Forbidden: a pod with hostNetwork attaches to no PodNetwork"}},
		"empty list":         {nets: []Network{}, want: []string{"Required value: at least one network"}},
		"every error at once": {nets: []Network{
			{PodNetworkName: "a", InterfaceName: "net1", IsDefaultGW: true},
			{PodNetworkName: "a", InterfaceName: "net1", IsDefaultGW: true},
		}, want: []string{"[1].podNetworkName: Duplicate", "[1].interfaceName: Duplicate", "[1].isDefaultGW: Invalid"}},
	} {
		t.Run(name, func(t *testing.T) {
			errs := ValidateNetworks(field.NewPath("networks"), tc.nets, tc.hostNetwork)
			if len(errs) != len(tc.want) {
				t.Fatalf("errors %v, want %d: %q", errs, len(tc.want), tc.want)
			}
			for i, e := range errs {
				if !strings.Contains(e.Error(), tc.want[i]) {
					t.Errorf("error %d = %q, want it to contain %q", i, e.Error(), tc.want[i])
				}
			}
		})
	}
}

func TestParseNetworks(t *testing.T) {
	for name, tc := range map[string]struct {
		value string
		want  []Network
		err   string
	}{
		"the KEP's fields": {value: `[{"podNetworkName":"default","interfaceName":"eth0","isDefaultGW":true},{"podNetworkAttachmentName":"fast","interfaceName":"net2"}]`,
			want: []Network{{PodNetworkName: "default", InterfaceName: "eth0", IsDefaultGW: true}, {PodNetworkAttachmentName: "fast", InterfaceName: "net2"}}},
		"empty list":     {value: `[]`, want: []Network{}},
		"unknown field":  {value: `[{"network":"default"}]`, err: `unknown field "network"`},
		"the KEP's name": {value: `[{"name":"default"}]`, want: []Network{{PodNetworkName: "default"}}},
		"not a list":     {value: `{"podNetworkName":"a"}`, err: "cannot unmarshal object"},
		"null":           {value: `null`, err: "not null"},
		"trailing data":  {value: `[] []`, err: "data after the list"},
		"not JSON":       {value: `dataplane`, err: "invalid character"},
		"wrong type":     {value: `[{"isDefaultGW":"yes"}]`, err: "cannot unmarshal string"},
		"the alias":      {value: `[{"podNetworkName":"a"}]`, want: []Network{{PodNetworkName: "a"}}},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseNetworks(tc.value)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), AnnotationNetworks) {
					t.Fatalf("error %v, want one naming the annotation and %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseNetworks = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestPodNetworks(t *testing.T) {
	for name, tc := range map[string]struct {
		annotations map[string]string
		hostNetwork bool
		want        []Network
		err         string
	}{
		"none: the default PodNetwork": {want: []Network{{PodNetworkName: "default"}}},
		"none, host network":           {hostNetwork: true},
		"listed":                       {annotations: map[string]string{AnnotationNetworks: `[{"podNetworkName":"a"}]`}, want: []Network{{PodNetworkName: "a"}}},
		"listed, host network": {annotations: map[string]string{AnnotationNetworks: `[{"podNetworkName":"a"}]`}, hostNetwork: true,
			err: "metadata.annotations[network.fastpath.dev/networks]: Forbidden"},
		"not JSON": {annotations: map[string]string{AnnotationNetworks: `a`}, err: "metadata.annotations[network.fastpath.dev/networks]: Invalid value: \"a\": want a JSON list"},
		"invalid":  {annotations: map[string]string{AnnotationNetworks: `[{"podNetworkName":"a"},{"podNetworkName":"a"}]`}, err: "[1].podNetworkName: Duplicate"},
	} {
		t.Run(name, func(t *testing.T) {
			got, errs := PodNetworks(tc.annotations, tc.hostNetwork)
			if tc.err != "" {
				if !strings.Contains(errs.ToAggregate().Error(), tc.err) || got != nil {
					t.Fatalf("PodNetworks = %v, %v; want error %q", got, errs, tc.err)
				}
				return
			}
			if len(errs) > 0 || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("PodNetworks = %+v, %v; want %+v", got, errs, tc.want)
			}
		})
	}
}

func TestNetworkStatus(t *testing.T) {
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	for name, tc := range map[string]struct {
		addrs []netip.Addr
		ip    string
		ips   []string
	}{
		"none":                       {},
		"one":                        {addrs: addrs("10.0.0.20"), ip: "10.0.0.20", ips: []string{"10.0.0.20"}},
		"dual stack, v6 first":       {addrs: addrs("2011::233", "10.0.0.20"), ip: "2011::233", ips: []string{"2011::233", "10.0.0.20"}},
		"two of a family: the first": {addrs: addrs("10.0.0.20", "10.0.0.21", "2011::1", "2011::2"), ip: "10.0.0.20", ips: []string{"10.0.0.20", "2011::1"}},
		"v4 in v6 is v4":             {addrs: addrs("::ffff:10.0.0.1", "10.0.0.2"), ip: "10.0.0.1", ips: []string{"10.0.0.1"}},
	} {
		t.Run(name, func(t *testing.T) {
			st := NewNetworkStatus("dataplane1", "net1", false, tc.addrs)
			if st.IP != tc.ip || !reflect.DeepEqual(st.IPs, tc.ips) || st.Name != "dataplane1" || st.InterfaceName != "net1" {
				t.Fatalf("NewNetworkStatus = %+v, want ip %q ips %q", st, tc.ip, tc.ips)
			}
			if errs := st.Validate(field.NewPath("s")); len(errs) > 0 {
				t.Fatal(errs)
			}
		})
	}
	for name, tc := range map[string]struct {
		st   NetworkStatus
		want string
	}{
		"no name":          {NetworkStatus{IPs: []string{"10.0.0.1"}, IP: "10.0.0.1"}, "s.name: Required"},
		"two IPv4":         {NetworkStatus{Name: "a", IPs: []string{"10.0.0.1", "10.0.0.2"}, IP: "10.0.0.1"}, "a second IPv4 address"},
		"ip not the first": {NetworkStatus{Name: "a", IPs: []string{"10.0.0.1", "::1"}, IP: "::1"}, "s.ip: Invalid value"},
		"ip without ips":   {NetworkStatus{Name: "a", IP: "::1"}, "s.ip: Invalid value"},
		"not an address":   {NetworkStatus{Name: "a", IPs: []string{"x"}, IP: "x"}, "s.ips[0]: Invalid value"},
	} {
		t.Run(name, func(t *testing.T) {
			if errs := tc.st.Validate(field.NewPath("s")); !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Fatalf("Validate = %v, want %q", errs, tc.want)
			}
		})
	}
}

// The KEP's examples decode into the types through the scheme. Not
// strictly: the KEP's conditions have a lastProbeTime, which
// metav1.Condition has not (the API server prunes it).
func TestKEPExamples(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	for file, check := range map[string]func(runtime.Object) bool{
		"kep-podnetwork.yaml": func(o runtime.Object) bool {
			pn, ok := o.(*PodNetwork)
			return ok && pn.Name == "dataplane" && pn.Spec.IsEnabled() && pn.Spec.Provider == "foo.io/bar"
		},
		"kep-podnetwork-params.yaml": func(o runtime.Object) bool {
			pn, ok := o.(*PodNetwork)
			return ok && len(pn.Spec.ParametersRefs) == 2 &&
				pn.Spec.ParametersRefs[1] == ParametersRef{Group: "k8s.cni.cncf.io", Kind: "network-attachment-definitions", Name: "complementaryParametersB", Namespace: "default"} &&
				len(pn.Status.Conditions) == 2
		},
		"kep-podnetworkattachment.yaml": func(o runtime.Object) bool {
			pna, ok := o.(*PodNetworkAttachment)
			return ok && pna.Namespace == "default" && pna.Spec.PodNetworkName == "dataplane" && pna.Spec.ParametersRefs[0].Kind == "podParams"
		},
	} {
		data, err := os.ReadFile("testdata/" + file)
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := decoder.Decode(data, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if !check(obj) {
			t.Errorf("%s decoded as %+v", file, obj)
		}
	}
}

func TestIsEnabled(t *testing.T) {
	no, yes := false, true
	for _, tc := range []struct {
		enabled *bool
		want    bool
	}{{nil, true}, {&yes, true}, {&no, false}} {
		if got := (&PodNetworkSpec{Enabled: tc.enabled}).IsEnabled(); got != tc.want {
			t.Errorf("IsEnabled(%v) = %v", tc.enabled, got)
		}
	}
}

// A deep copy shares no memory with its original: changing every
// reference field of the copy leaves the original as it was.
func TestDeepCopy(t *testing.T) {
	yes := true
	pn := &PodNetwork{
		Spec:   PodNetworkSpec{Enabled: &yes, ParametersRefs: []ParametersRef{{Group: "g", Kind: "k", Name: "n"}}},
		Status: PodNetworkStatus{Conditions: []metav1.Condition{{Type: ConditionReady}}},
	}
	pn.Labels = map[string]string{"a": "b"}
	c := pn.DeepCopyObject().(*PodNetwork)
	*c.Spec.Enabled = false
	c.Spec.ParametersRefs[0].Name = "x"
	c.Status.Conditions[0].Type = "x"
	c.Labels["a"] = "x"
	if !*pn.Spec.Enabled || pn.Spec.ParametersRefs[0].Name != "n" || pn.Status.Conditions[0].Type != ConditionReady || pn.Labels["a"] != "b" {
		t.Errorf("the copy shares memory: %+v", pn)
	}
	list := (&PodNetworkList{Items: []PodNetwork{*pn}}).DeepCopyObject().(*PodNetworkList)
	list.Items[0].Spec.ParametersRefs[0].Name = "y"
	if pn.Spec.ParametersRefs[0].Name != "n" {
		t.Error("the list's copy shares memory")
	}

	pna := &PodNetworkAttachment{
		Spec:   PodNetworkAttachmentSpec{PodNetworkName: "a", ParametersRefs: []ParametersRef{{Name: "n"}}},
		Status: PodNetworkAttachmentStatus{Conditions: []metav1.Condition{{Type: ConditionReady}}},
	}
	d := pna.DeepCopyObject().(*PodNetworkAttachment)
	d.Spec.ParametersRefs[0].Name = "x"
	d.Status.Conditions[0].Type = "x"
	plist := (&PodNetworkAttachmentList{Items: []PodNetworkAttachment{*pna}}).DeepCopyObject().(*PodNetworkAttachmentList)
	plist.Items[0].Spec.ParametersRefs[0].Name = "y"
	if pna.Spec.ParametersRefs[0].Name != "n" || pna.Status.Conditions[0].Type != ConditionReady {
		t.Errorf("the copy shares memory: %+v", pna)
	}
	if (*PodNetwork)(nil).DeepCopy() != nil || (*PodNetworkAttachment)(nil).DeepCopy() != nil {
		t.Error("the copy of nil is not nil")
	}
}

// A network list longer than bounds.AnnotationBytes is refused unread, and
// its error does not repeat it; one of that length is read.
func TestNetworksTooLong(t *testing.T) {
	elem := `{"podNetworkName": "default"},`
	long := "[" + strings.Repeat(elem, bounds.AnnotationBytes/len(elem)) + `{"podNetworkName": "x"}]`
	if _, err := ParseNetworks(long); err == nil || !strings.Contains(err.Error(), "more than the 65536 a pod's network list may have") {
		t.Errorf("ParseNetworks: %v", err)
	}
	_, errs := PodNetworks(map[string]string{AnnotationNetworks: long}, false)
	if len(errs) != 1 || len(errs[0].Error()) > 300 || !strings.HasPrefix(errs[0].Error(), "metadata.annotations[network.fastpath.dev/networks]: Too long: is ") {
		t.Errorf("PodNetworks: %.400v", errs)
	}
	pad := bounds.AnnotationBytes - len(`[{"podNetworkName": "x"}]`)
	atLimit := `[{"podNetworkName": "x"}]` + strings.Repeat(" ", pad)
	if nets, err := ParseNetworks(atLimit); err != nil || len(nets) != 1 {
		t.Errorf("a list of %d bytes: %v, %v", len(atLimit), nets, err)
	}
}

// The KEP's field names and fastpath's aliases read the same; one element
// naming two objects by both is refused.
func TestParseNetworksKEPNames(t *testing.T) {
	kep, err := ParseNetworks(`[{"name": "default", "interfaceName": "eth0", "isDefaultGW": true}, {"name": "dataplane1", "interfaceName": "net1"},
		{"attachmentName": "my-interface-fast-net", "interfaceName": "net2"}]`)
	if err != nil {
		t.Fatal(err)
	}
	alias, err := ParseNetworks(`[{"podNetworkName": "default", "interfaceName": "eth0", "isDefaultGW": true}, {"podNetworkName": "dataplane1", "interfaceName": "net1"},
		{"podNetworkAttachmentName": "my-interface-fast-net", "interfaceName": "net2"}]`)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(kep, alias) {
		t.Errorf("the KEP's names read %+v, the aliases %+v", kep, alias)
	}
	same, err := ParseNetworks(`[{"name": "a", "podNetworkName": "a"}]`)
	if err != nil || same[0].PodNetworkName != "a" {
		t.Errorf("both names, the same: %+v, %v", same, err)
	}
	for value, want := range map[string]string{
		`[{"name": "a", "podNetworkName": "b"}]`:                     `element 0: name "a" and podNetworkName "b" name different objects`,
		`[{"attachmentName": "a", "podNetworkAttachmentName": "b"}]`: `element 0: attachmentName "a" and podNetworkAttachmentName "b" name different objects`,
	} {
		if _, err := ParseNetworks(value); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", value, err, want)
		}
	}
	if _, errs := PodNetworks(map[string]string{AnnotationNetworks: `[{"name": "a", "attachmentName": "b"}]`}, false); len(errs) != 1 ||
		!strings.Contains(errs[0].Error(), "only one of name (podNetworkName) and attachmentName (podNetworkAttachmentName)") {
		t.Errorf("name and attachmentName in one element: %v", errs)
	}
}

func TestNodeLabel(t *testing.T) {
	if got := NodeLabel("dataplane1"); got != "podnetwork.network.fastpath.dev/dataplane1" {
		t.Errorf("NodeLabel(dataplane1) = %q", got)
	}
	long := strings.Repeat("a", 64)
	got := NodeLabel(long)
	name, ok := strings.CutPrefix(got, NodeLabelPrefix)
	if !ok || len(name) > 63 || !strings.HasPrefix(name, "h.") || NodeLabel(long+"b") == got {
		t.Errorf("NodeLabel(64 characters) = %q: want the prefix and a hashed name of at most 63 characters, one per name", got)
	}
	for _, key := range []string{NodeLabel("x"), got} {
		if errs := validation.IsQualifiedName(key); len(errs) > 0 {
			t.Errorf("NodeLabel: %q is not a label key: %v", key, errs)
		}
		if !IsNodeLabel(key) {
			t.Errorf("IsNodeLabel(%q) = false", key)
		}
	}
}

// A network list beyond bounds.Items or bounds.Depth is refused before it
// is decoded, with one error naming the list and its size; the list is
// never quoted whole.
func TestNetworksBounds(t *testing.T) {
	many := "[" + strings.Repeat(`{"podNetworkName": "a"},`, 300) + `{"podNetworkName": "b"}]`
	deep := `[{"podNetworkName": ` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}]`
	for _, tc := range []struct{ value, want string }{
		{many, "metadata.annotations[network.fastpath.dev/networks]: Too many: 301: must have at most 256 items"},
		{deep, "metadata.annotations[network.fastpath.dev/networks][0].podNetworkName" + strings.Repeat("[0]", bounds.Depth-2) +
			": Too many: 42: must have at most 32 levels of nested objects and lists"},
	} {
		if _, err := ParseNetworks(tc.value); err == nil || err.Error() != tc.want {
			t.Errorf("ParseNetworks: %v\nwant %s", err, tc.want)
		}
		if _, errs := PodNetworks(map[string]string{AnnotationNetworks: tc.value}, false); len(errs) != 1 || errs[0].Error() != tc.want {
			t.Errorf("PodNetworks: %v\nwant %s", errs, tc.want)
		}
	}
	bad := `[{"podNetworkName": "` + strings.Repeat("x", 60000) + `"`
	if _, errs := PodNetworks(map[string]string{AnnotationNetworks: bad}, false); len(errs) != 1 || len(errs[0].Error()) > 1024 {
		t.Errorf("PodNetworks of a list that does not decode: %d errors, the first of %d bytes", len(errs), len(errs[0].Error()))
	}
}
