package npwg

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

const podNS = "my-namespace"

// att is an attachment of the tests: ns/name, and the rest set by set.
func att(index int, ns, name string, set ...func(*Attachment)) Attachment {
	a := Attachment{Index: index}
	a.Namespace, a.Name = ns, name
	for _, s := range set {
		s(&a)
	}
	return a
}

func show(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

// errLines are the errors as validate prints them, without the
// annotation's path, which every one starts with.
func errLines(t *testing.T, errs field.ErrorList) []string {
	t.Helper()
	prefix := NetworksPath().String()
	var lines []string
	for _, e := range errs {
		s := e.Error()
		if !strings.HasPrefix(s, prefix) {
			t.Errorf("error %q does not start with %s", s, prefix)
		}
		lines = append(lines, strings.TrimPrefix(s, prefix))
	}
	return lines
}

// specAnnotation reads the selection annotation of one of the standard's
// examples in testdata/pods.
func specAnnotation(t testing.TB, file string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "pods", file))
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(file, ".txt") {
		var lines []string
		for _, l := range strings.Split(string(data), "\n") {
			if !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n")
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	v, ok := pod.Annotations[nadv1.NetworkAttachmentAnnot]
	if !ok {
		t.Fatalf("%s has no %s annotation", file, nadv1.NetworkAttachmentAnnot)
	}
	return v
}

// The standard's own examples (§4.1.1, §4.1.2 and its keys, §4.2.2),
// verbatim.
func TestParseNetworksSpecExamples(t *testing.T) {
	for file, tc := range map[string]struct {
		want []Attachment
		err  string // the one error, when the example is not valid
	}{
		"spec-4.1.1.yaml": {want: []Attachment{att(0, podNS, "net-a"), att(1, podNS, "net-b"), att(2, "other-ns", "net-c")}},
		"spec-4.1.2.yaml": {want: []Attachment{
			att(0, podNS, "net-a"),
			att(1, podNS, "net-b", func(a *Attachment) { a.IPRequest, a.MacRequest = []string{"1.2.3.4"}, "aa:bb:cc:dd:ee:ff" }),
			att(2, "other-ns", "net-c"),
		}},
		"spec-4.1.2.1.3.1.yaml": {want: []Attachment{att(0, podNS, "net-b", func(a *Attachment) { a.IPRequest = []string{"10.2.2.42/24", "2001:db8::5/64"} })}},
		"spec-4.1.2.1.4.1.yaml": {want: []Attachment{att(0, podNS, "net-b", func(a *Attachment) { a.MacRequest = "02:23:45:67:89:01" })}},
		// The example's value is in typographic quotes, which JSON has not.
		"spec-4.1.2.1.6.1.yaml": {err: "not valid JSON: invalid character 'â' looking for beginning of value (at byte 64)"},
		"spec-4.1.2.1.7.1.yaml": {want: []Attachment{att(0, podNS, "net-b", func(a *Attachment) {
			a.PortMappingsRequest = []*nadv1.PortMapEntry{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}
		})}},
		// The example has a key without its closing quote, and comments.
		"spec-4.1.2.1.8.1.yaml":       {err: "not valid JSON: invalid character '\\n' in string literal (at byte 44)"},
		"spec-4.1.2.1.9.1.yaml":       {want: []Attachment{att(0, podNS, "net-a"), att(1, podNS, "net-b", func(a *Attachment) { a.GatewayRequest = []net.IP{net.ParseIP("10.0.0.1")} })}},
		"spec-4.1.2.1.10.1-value.txt": {want: []Attachment{att(0, podNS, "net-b", func(a *Attachment) { a.InfinibandGUIDRequest = "24:8a:07:03:00:8d:ae:2f" })}},
		"spec-4.1.2.1.11.1.yaml":      {want: []Attachment{att(0, podNS, "net-a"), att(1, podNS, "net-b", func(a *Attachment) { a.IPAMClaimReference = "vm123.tenantblue" })}},
		"spec-4.2.2.yaml":             {want: []Attachment{att(0, podNS, "net-a"), att(1, podNS, "net-a")}},
	} {
		t.Run(file, func(t *testing.T) {
			got, errs := ParseNetworks(podNS, specAnnotation(t, file))
			lines := errLines(t, errs)
			switch {
			case tc.err != "" && (len(lines) != 1 || !strings.Contains(lines[0], tc.err)):
				t.Errorf("errors %q, want one with %q", lines, tc.err)
			case tc.err == "" && len(errs) > 0:
				t.Errorf("errors: %q", lines)
			case !reflect.DeepEqual(got, tc.want):
				t.Errorf("got  %s\nwant %s", show(got), show(tc.want))
			}
		})
	}
	files, err := filepath.Glob("testdata/pods/*")
	if err != nil || len(files) != 11 {
		t.Errorf("the examples are %v (%v); every one needs a case", files, err)
	}
}

func TestParseNetworksValid(t *testing.T) {
	for name, tc := range map[string]struct {
		value string
		want  []Attachment
	}{
		"empty":                  {value: "", want: nil},
		"only whitespace":        {value: " \n\t", want: nil},
		"an empty JSON list":     {value: " [ ] ", want: nil},
		"one name":               {value: "net-a", want: []Attachment{att(0, podNS, "net-a")}},
		"a name with dots":       {value: "a.b.c", want: []Attachment{att(0, podNS, "a.b.c")}},
		"the same network twice": {value: "net-a,net-a", want: []Attachment{att(0, podNS, "net-a"), att(1, podNS, "net-a")}},
		"whitespace around elements": {
			value: "  net-a , other-ns/net-b@eth1 ,\n\tnet-c@net5\n",
			want: []Attachment{
				att(0, podNS, "net-a"),
				att(1, "other-ns", "net-b", func(a *Attachment) { a.InterfaceRequest = "eth1" }),
				att(2, podNS, "net-c", func(a *Attachment) { a.InterfaceRequest = "net5" }),
			},
		},
		"the same network under two names": {
			value: "net-a@left,net-a@right",
			want: []Attachment{
				att(0, podNS, "net-a", func(a *Attachment) { a.InterfaceRequest = "left" }),
				att(1, podNS, "net-a", func(a *Attachment) { a.InterfaceRequest = "right" }),
			},
		},
		"an interface name of 15 bytes, and odd characters the kernel takes": {
			value: `net-a@abcdefghijklmno,net-b@a.b-c_d%e`,
			want: []Attachment{
				att(0, podNS, "net-a", func(a *Attachment) { a.InterfaceRequest = "abcdefghijklmno" }),
				att(1, podNS, "net-b", func(a *Attachment) { a.InterfaceRequest = "a.b-c_d%e" }),
			},
		},
		"an empty namespace is the pod's": {
			value: `[{"name": "net-a", "namespace": ""}]`,
			want:  []Attachment{att(0, podNS, "net-a")},
		},
		"every key": {
			value: `[{"name": "net-b", "namespace": "other-ns", "ips": ["10.2.2.42/24", "2001:db8::5"], "mac": "AA-BB-CC-DD-EE-FF",
				"interface": "data0", "cni-args": {"spoofchk": "on", "vlan": 12345678901234567890, "nested": {"a": [1, "b"]}},
				"portMappings": [{"hostPort": 8080, "containerPort": 80}, {"hostPort": 53, "containerPort": 5353, "protocol": "UDP", "hostIP": "192.0.2.1"}],
				"bandwidth": {"ingressRate": 2048, "ingressBurst": 300, "egressRate": 8000},
				"default-route": ["10.2.2.1", "2001:db8::1"], "infiniband-guid": "24:8A:07:03:00:8D:AE:2F",
				"org.example.colour": {"any": "thing"}}]`,
			want: []Attachment{att(0, "other-ns", "net-b", func(a *Attachment) {
				a.IPRequest = []string{"10.2.2.42/24", "2001:db8::5"}
				a.MacRequest = "aa:bb:cc:dd:ee:ff"
				a.InterfaceRequest = "data0"
				a.CNIArgs = &map[string]any{"spoofchk": "on", "vlan": json.Number("12345678901234567890"), "nested": map[string]any{"a": []any{json.Number("1"), "b"}}}
				a.PortMappingsRequest = []*nadv1.PortMapEntry{{HostPort: 8080, ContainerPort: 80}, {HostPort: 53, ContainerPort: 5353, Protocol: "UDP", HostIP: "192.0.2.1"}}
				a.BandwidthRequest = &nadv1.BandwidthEntry{IngressRate: 2048, IngressBurst: 300, EgressRate: 8000}
				a.GatewayRequest = []net.IP{net.ParseIP("10.2.2.1"), net.ParseIP("2001:db8::1")}
				a.InfinibandGUIDRequest = "24:8a:07:03:00:8d:ae:2f"
				a.Extensions = map[string]json.RawMessage{"org.example.colour": json.RawMessage(`{"any": "thing"}`)}
			})},
		},
		"an empty default-route still selects the attachment": {
			value: `[{"name": "net-a"}, {"name": "net-b", "default-route": []}]`,
			want:  []Attachment{att(0, podNS, "net-a"), att(1, podNS, "net-b", func(a *Attachment) { a.GatewayRequest = []net.IP{} })},
		},
		"an IPAMClaim": {
			value: `[{"name": "net-b", "ipam-claim-reference": "vm-a.tenantred.pod16367aacb67"}]`,
			want:  []Attachment{att(0, podNS, "net-b", func(a *Attachment) { a.IPAMClaimReference = "vm-a.tenantred.pod16367aacb67" })},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, errs := ParseNetworks(podNS, tc.value)
			if len(errs) > 0 {
				t.Fatalf("errors: %q", errLines(t, errs))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %s\nwant %s", show(got), show(tc.want))
			}
			if len(got) > 0 && got[0].DefaultRoute() != (got[0].GatewayRequest != nil) {
				t.Error("DefaultRoute disagrees with GatewayRequest")
			}
		})
	}
}

// Every malformed form has an error of its own, whose path names the
// element and the key.
func TestParseNetworksInvalid(t *testing.T) {
	for name, tc := range map[string]struct {
		value string
		want  []string // each error, in order: parts of its line, in order, separated by …
	}{
		"an empty element":             {"net-a,,net-b", []string{"[1]: Required value: empty element"}},
		"a trailing comma":             {"net-a,", []string{"[1]: Required value: empty element"}},
		"a leading comma":              {",net-a", []string{"[0]: Required value"}},
		"only a comma":                 {",", []string{"[0]: Required value", "[1]: Required value"}},
		"whitespace in an element":     {"net a", []string{`[0]: Invalid value: "net a": must not contain whitespace`}},
		"whitespace around a slash":    {"ns / net-a", []string{`[0]: Invalid value: "ns / net-a": must not contain whitespace`}},
		"two slashes":                  {"a/b/c", []string{`[0]: Invalid value: "a/b/c": must be [namespace/]name[@interface], with at most one '/'`}},
		"no namespace before a slash":  {"/net-a", []string{`[0].namespace: Required value: "/net-a" names no namespace`}},
		"no name after a slash":        {"ns/", []string{"[0].name: Required value"}},
		"a name that is not DNS-1123":  {"Net_A", []string{`[0].name: Invalid value: "Net_A": a lowercase RFC 1123 subdomain`}},
		"a namespace with a dot":       {"a.b/net-a", []string{`[0].namespace: Invalid value: "a.b": must not contain dots`}},
		"a namespace too long":         {strings.Repeat("n", 64) + "/net-a", []string{"[0].namespace: Invalid value…must be no more than 63 characters"}},
		"no interface after @":         {"net-a@", []string{"[0].interface: Required value: an interface name after '@'"}},
		"two @":                        {"net-a@b@c", []string{"with at most one '@'"}},
		"an interface name too long":   {"net-a@abcdefghijklmnop", []string{`[0].interface: Invalid value: "abcdefghijklmnop": a Linux interface name must be at most 15 bytes, not 16`}},
		"an interface name with /":     {"net-a@eth/0", []string{"[0].interface: Invalid value: \"eth/0\": a Linux interface name must not contain '/' or ':'"}},
		"an interface name with :":     {"net-a@eth0:1", []string{"must not contain '/' or ':'"}},
		"an interface name .":          {"net-a@.", []string{`must not be "." or ".."`}},
		"an interface name ..":         {"net-a@..", []string{`must not be "." or ".."`}},
		"a JSON element in the list":   {`net-a,{"name":"net-b"}`, []string{`[1]: Invalid value: "{\"name\":\"net-b\"}": must be [namespace/]name[@interface]; the JSON format is a list of objects`}},
		"an interface asked for twice": {"net-a,net-b@net1,net-c@net1", []string{`[2].interface: Duplicate value: "net1": element [1] (network my-namespace/net-b) asks for this interface name too`}},
		"the same tuple twice": {"net-a@net1,net-a@net1", []string{
			`[1].interface: Duplicate value: "net1": element [0] attaches network my-namespace/net-a as net1 too`}},
		"several problems, each on its own": {"Net_A,,b/c/d,net-e@", []string{"[0].name: Invalid value", "[1]: Required value", "[2]: Invalid value", "[3].interface: Required value"}},

		"a JSON object":                 {`{"name": "net-a"}`, []string{`: Invalid value: "{\"name\": \"net-a\"}": must be a JSON list of objects, like [{"name": "net-a"}], not an object`}},
		"a JSON string":                 {`"net-a"`, []string{"must be a JSON list of objects, like [{\"name\": \"net-a\"}], not a string"}},
		"JSON that ends early":          {`[{"name": "net-a"}`, []string{"not valid JSON: unexpected end of JSON input"}},
		"data after the list":           {`[{"name": "net-a"}] net-b`, []string{"not valid JSON: invalid character 'n' after top-level value (at byte 21)"}},
		"a number element":              {`[1]`, []string{`[0]: Invalid value: "1": must be an object with at least a name, like {"name": "net-a"}, not a number`}},
		"a null element":                {`[null]`, []string{"[0]: Invalid value: \"null\": must be an object with at least a name…not null"}},
		"a string element":              {`["net-a"]`, []string{"[0]: Invalid value…not a string"}},
		"no name":                       {`[{}]`, []string{"[0].name: Required value"}},
		"an empty name":                 {`[{"name": ""}]`, []string{"[0].name: Required value"}},
		"a number for a name":           {`[{"name": 5}]`, []string{`[0].name: Invalid value: "5": must be a string, not a number`}},
		"null for a name":               {`[{"name": null}]`, []string{`[0].name: Invalid value: "null": must be a string, not null`}},
		"a key in the wrong case":       {`[{"Name": "net-a"}]`, []string{`[0].Name: Forbidden: unknown key; keys are case-sensitive: did you mean "name"?`, "[0].name: Required value"}},
		"an unknown key":                {`[{"name": "net-a", "colour": "red"}]`, []string{"[0].colour: Forbidden: unknown key: the standard reserves keys without a period"}},
		"a key twice":                   {`[{"name": "net-a", "name": "net-b"}]`, []string{`[0].name: Duplicate value: "name": the key appears more than once`}},
		"a namespace of the wrong type": {`[{"name": "net-a", "namespace": ["ns"]}]`, []string{"[0].namespace: Invalid value…must be a string, not a list"}},
		"a namespace not DNS-1123":      {`[{"name": "net-a", "namespace": "Other"}]`, []string{`[0].namespace: Invalid value: "Other"`}},
		"no ips":                        {`[{"name": "net-a", "ips": []}]`, []string{`[0].ips: Invalid value: "[]": must list at least one address`}},
		"ips as a string":               {`[{"name": "net-a", "ips": "10.0.0.1"}]`, []string{"[0].ips: Invalid value…must be a list of strings, not a string"}},
		"ips with a number":             {`[{"name": "net-a", "ips": [10]}]`, []string{`[0].ips[0]: Invalid value: "10": must be a string, not a number`}},
		"an address out of range":       {`[{"name": "net-a", "ips": ["10.0.0.256"]}]`, []string{`[0].ips[0]: Invalid value: "10.0.0.256": must be an IPv4 or IPv6 address`}},
		"a prefix length too long":      {`[{"name": "net-a", "ips": ["10.0.0.1/33"]}]`, []string{`[0].ips[0]: Invalid value: "10.0.0.1/33": must be an IPv4 or IPv6 address with an optional prefix length`}},
		"an address with a zone":        {`[{"name": "net-a", "ips": ["fe80::1%eth0"]}]`, []string{"[0].ips[0]: Invalid value…must not have a zone"}},
		"an address with leading zeros": {`[{"name": "net-a", "ips": ["010.0.0.1"]}]`, []string{"[0].ips[0]: Invalid value"}},
		"an address twice":              {`[{"name": "net-a", "ips": ["10.0.0.1/24", "10.0.0.1/16"]}]`, []string{`[0].ips[1]: Duplicate value: "10.0.0.1/16": the same address as ips[0]`}},
		"ips and an IPAMClaim":          {`[{"name": "net-a", "ips": ["10.0.0.1"], "ipam-claim-reference": "claim"}]`, []string{"[0].ipam-claim-reference: Forbidden: an element asks for static ips or names an IPAMClaim to take them from, not both"}},
		"a MAC too short":               {`[{"name": "net-a", "mac": "aa:bb:cc:dd:ee"}]`, []string{`[0].mac: Invalid value: "aa:bb:cc:dd:ee": must be a MAC address`}},
		"a MAC of 8 bytes":              {`[{"name": "net-a", "mac": "24:8a:07:03:00:8d:ae:2f"}]`, []string{"must be a 6-byte Ethernet MAC address, not 8 bytes"}},
		"a multicast MAC":               {`[{"name": "net-a", "mac": "01:00:5e:00:00:01"}]`, []string{"[0].mac: Invalid value…must be a unicast address"}},
		"a MAC of zeros":                {`[{"name": "net-a", "mac": "00:00:00:00:00:00"}]`, []string{"must not be all zeros"}},
		"a MAC as a number":             {`[{"name": "net-a", "mac": 1}]`, []string{"[0].mac: Invalid value…must be a string"}},
		"an empty interface":            {`[{"name": "net-a", "interface": ""}]`, []string{"[0].interface: Required value: an interface name ; leave it out to have one chosen"}},
		"an interface with a space":     {`[{"name": "net-a", "interface": "net 1"}]`, []string{"[0].interface: Invalid value…must not contain whitespace"}},
		"an interface with a NUL":       {`[{"name": "net-a", "interface": "net\u00001"}]`, []string{"must not contain a NUL byte"}},
		"an interface with 0xa0":        {`[{"name": "net-a", "interface": "caf\u00e0"}]`, []string{"must not contain the byte 0xa0"}},
		"cni-args as a list":            {`[{"name": "net-a", "cni-args": ["a"]}]`, []string{"[0].cni-args: Invalid value…must be an object of arguments for the plugins, not a list"}},
		"cni-args null":                 {`[{"name": "net-a", "cni-args": null}]`, []string{"[0].cni-args: Invalid value…not null"}},
		"no port mappings":              {`[{"name": "net-a", "portMappings": []}]`, []string{"[0].portMappings: Invalid value…at least one port mapping"}},
		"port mappings as an object":    {`[{"name": "net-a", "portMappings": {"hostPort": 80}}]`, []string{"[0].portMappings: Invalid value…must be a list of port mappings, not an object"}},
		"a port mapping as a number":    {`[{"name": "net-a", "portMappings": [80]}]`, []string{"[0].portMappings[0]: Invalid value…not a number"}},
		"a port of 0":                   {`[{"name": "net-a", "portMappings": [{"hostPort": 0, "containerPort": 80}]}]`, []string{"[0].portMappings[0].hostPort: Invalid value: 0: must be between 1 and 65535"}},
		"a port too high":               {`[{"name": "net-a", "portMappings": [{"hostPort": 80, "containerPort": 65536}]}]`, []string{"[0].portMappings[0].containerPort: Invalid value: 65536: must be between 1 and 65535"}},
		"a port with a fraction":        {`[{"name": "net-a", "portMappings": [{"hostPort": 80.5, "containerPort": 80}]}]`, []string{`[0].portMappings[0].hostPort: Invalid value: "80.5": must be an integer`}},
		"a port as a string":            {`[{"name": "net-a", "portMappings": [{"hostPort": "80", "containerPort": 80}]}]`, []string{"[0].portMappings[0].hostPort: Invalid value…must be an integer, not a string"}},
		"a port beyond int64":           {`[{"name": "net-a", "portMappings": [{"hostPort": 99999999999999999999, "containerPort": 80}]}]`, []string{"[0].portMappings[0].hostPort: Invalid value…must be between 1 and 65535"}},
		"no container port":             {`[{"name": "net-a", "portMappings": [{"hostPort": 8080}]}]`, []string{"[0].portMappings[0].containerPort: Required value"}},
		"an unknown protocol":           {`[{"name": "net-a", "portMappings": [{"hostPort": 1, "containerPort": 1, "protocol": "icmp"}]}]`, []string{`[0].portMappings[0].protocol: Unsupported value: "icmp": supported values: "TCP", "UDP", "SCTP"`}},
		"a host IP that is not one":     {`[{"name": "net-a", "portMappings": [{"hostPort": 1, "containerPort": 1, "hostIP": "x"}]}]`, []string{"[0].portMappings[0].hostIP: Invalid value"}},
		"an unknown port mapping key":   {`[{"name": "net-a", "portMappings": [{"hostPort": 1, "containerPort": 1, "hostport": 2}]}]`, []string{"[0].portMappings[0].hostport: Forbidden: unknown key"}},
		"a port mapping key twice":      {`[{"name": "net-a", "portMappings": [{"hostPort": 1, "containerPort": 1, "hostPort": 2}]}]`, []string{`[0].portMappings[0].hostPort: Duplicate value: "hostPort": the key appears more than once`}},
		"no bandwidth":                  {`[{"name": "net-a", "bandwidth": {}}]`, []string{"[0].bandwidth: Invalid value…must have at least one of ingressRate"}},
		"bandwidth as a number":         {`[{"name": "net-a", "bandwidth": 5}]`, []string{"[0].bandwidth: Invalid value…not a number"}},
		"a burst without a rate":        {`[{"name": "net-a", "bandwidth": {"ingressBurst": 300, "egressRate": 8000}}]`, []string{"[0].bandwidth.ingressRate: Required value: ingressBurst limits nothing without ingressRate"}},
		"a rate of 0":                   {`[{"name": "net-a", "bandwidth": {"egressRate": 0}}]`, []string{"[0].bandwidth.egressRate: Invalid value: 0: must be between 1 and"}},
		"a negative rate":               {`[{"name": "net-a", "bandwidth": {"egressRate": -5}}]`, []string{"[0].bandwidth.egressRate: Invalid value: -5"}},
		"an unknown bandwidth key":      {`[{"name": "net-a", "bandwidth": {"rate": 5}}]`, []string{"[0].bandwidth.rate: Forbidden: unknown key"}},
		"two default routes": {`[{"name": "net-a", "default-route": ["10.0.0.1"]}, {"name": "net-b"}, {"name": "net-c", "default-route": []}]`, []string{
			"[2].default-route: Forbidden: element [0] has default-route too; only one attachment may carry the pod's default route"}},
		"a default route with a prefix": {`[{"name": "net-a", "default-route": ["10.0.0.0/24"]}]`, []string{`[0].default-route[0]: Invalid value: "10.0.0.0/24": a gateway must be an IPv4 or IPv6 address`}},
		"a default route as a string":   {`[{"name": "net-a", "default-route": "10.0.0.1"}]`, []string{"[0].default-route: Invalid value…must be a list of strings"}},
		"a GUID of 6 bytes":             {`[{"name": "net-a", "infiniband-guid": "02:23:45:67:89:01"}]`, []string{"[0].infiniband-guid: Invalid value…must be an InfiniBand GUID of 8 bytes, not 6 bytes"}},
		"a GUID that is not one":        {`[{"name": "net-a", "infiniband-guid": "guid"}]`, []string{"[0].infiniband-guid: Invalid value"}},
		"an empty IPAMClaim":            {`[{"name": "net-a", "ipam-claim-reference": ""}]`, []string{"[0].ipam-claim-reference: Required value"}},
		"an IPAMClaim not DNS-1123":     {`[{"name": "net-a", "ipam-claim-reference": "Bad_Name"}]`, []string{"[0].ipam-claim-reference: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"}},
		"an interface asked for twice in JSON": {`[{"name": "net-a", "interface": "net1"}, {"name": "net-b", "interface": "net1"}]`, []string{
			`[1].interface: Duplicate value: "net1": element [0] (network my-namespace/net-a) asks for this interface name too`}},
		"the same tuple across namespaces spelled two ways": {`[{"name": "net-a", "interface": "x"}, {"name": "net-a", "namespace": "my-namespace", "interface": "x"}]`, []string{
			`[1].interface: Duplicate value: "x": element [0] attaches network my-namespace/net-a as x too`}},
		"several problems in JSON, each on its own": {`[{"name": "A", "mac": "x"}, {"ips": []}]`, []string{
			"[0].name: Invalid value", "[0].mac: Invalid value", "[1].ips: Invalid value", "[1].name: Required value"}},
	} {
		t.Run(name, func(t *testing.T) {
			got, errs := ParseNetworks(podNS, tc.value)
			if got != nil {
				t.Errorf("attachments %s from an invalid annotation", show(got))
			}
			lines := errLines(t, errs)
			if len(lines) != len(tc.want) {
				t.Fatalf("errors:\n%s\nwant %d", strings.Join(lines, "\n"), len(tc.want))
			}
			for i, w := range tc.want {
				if !containsInOrder(lines[i], strings.Split(w, "…")) {
					t.Errorf("error %d is %q, want it to say %q", i, lines[i], w)
				}
			}
		})
	}
}

// The paths name the annotation, the element and the key, as validate
// prints them.
func TestParseNetworksPaths(t *testing.T) {
	_, errs := ParseNetworks(podNS, "net-a,net-b@a/b")
	if len(errs) != 1 || errs[0].Field != "metadata.annotations[k8s.v1.cni.cncf.io/networks][1].interface" {
		t.Errorf("errors %v", errs)
	}
}

func containsInOrder(s string, parts []string) bool {
	for _, p := range parts {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}
