package npwg

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/bounds/boundstest"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// FuzzParseNetworks: any annotation parses without panicking, within
// boundstest.Budget and saying at most bounds.MessageBytes; every error
// is under the annotation's path; and what parses has the shape the rest
// of the package relies on: valid names, addresses and interface names,
// unique interfaces after AssignInterfaces, one default route at most, a
// runtimeConfig that encodes, and a status that encodes and decodes.
func FuzzParseNetworks(f *testing.F) {
	files, _ := filepath.Glob("testdata/pods/*")
	for _, file := range files {
		f.Add(specAnnotation(f, filepath.Base(file)))
	}
	for _, seed := range []string{
		"net-a,net-a", "net-a@net1,other-ns/net-b@eth1, net-c", "net-a,,", "a/b/c@d@e", "net-a@lo", " ns/ ",
		`[{"name": "net-a", "interface": "net1"}, {"name": "net-a"}]`,
		`[{"name": "n", "ips": ["10.0.0.1/24", "::1"], "mac": "02:00:00:00:00:01", "cni-args": {"a": [1, {"b": null}]}, "portMappings": [{"hostPort": 1, "containerPort": 65535, "protocol": "Sctp", "hostIP": "::"}], "bandwidth": {"ingressRate": 1, "egressBurst": 2}, "default-route": [], "infiniband-guid": "00:00:00:00:00:00:00:00", "org.x.y": 1}]`,
		`[{"name": "n", "name": 1, "Name": 2}]`, `[{"name": "n", "ips": [], "ipam-claim-reference": ""}]`, `{"name": "n"}`, `[null, 1, "x", [], {}]`,
		`[{"name": "n", "portMappings": [{"hostPort": 1e2, "containerPort": -0}]}]`, `[{"name":"n","interface":"\u00a0"}]`,
	} {
		f.Add(seed)
	}
	for _, n := range []int{0, 1} {
		f.Add(repeatList("A", ",", bounds.Items+n))
		f.Add("[" + repeatList(`{"name": "A"}`, ",", bounds.Items+n) + "]")
		f.Add(`[{"name": "a", "cni-args": {` + repeatList(`"k": 1`, ",", bounds.Items+n) + `}}]`)
		f.Add(`[{"name": "a", "cni-args": {"k": ` + strings.Repeat("[", bounds.Depth-3+n) + strings.Repeat("]", bounds.Depth-3+n) + `}}]`)
		f.Add("net-a" + strings.Repeat(" ", bounds.AnnotationBytes-len("net-a")+n))
	}
	permissive := mustList(f, everything)
	f.Fuzz(func(t *testing.T, value string) {
		var atts []Attachment
		var errs field.ErrorList
		boundstest.Check(t, func() string {
			atts, errs = ParseNetworks(podNS, value)
			return bounds.Join(errs)
		})
		prefix := NetworksPath().String()
		for _, e := range errs {
			if !strings.HasPrefix(e.Field, prefix) {
				t.Errorf("error %q is not under %s", e.Error(), prefix)
			}
		}
		if len(errs) > 0 {
			if atts != nil {
				t.Errorf("attachments with errors")
			}
			return
		}
		defaultRoutes := 0
		asksForLo := false
		for _, a := range atts {
			if len(validation.IsDNS1123Subdomain(a.Name)) > 0 || len(validation.IsDNS1123Label(a.Namespace)) > 0 {
				t.Errorf("accepted network %q", a.Network())
			}
			if a.InterfaceRequest != "" && ValidInterfaceName(a.InterfaceRequest) != nil {
				t.Errorf("accepted interface %q", a.InterfaceRequest)
			}
			asksForLo = asksForLo || a.InterfaceRequest == "lo"
			for _, ip := range a.IPRequest {
				if _, err := parseIPRequest(ip); err != nil {
					t.Errorf("accepted address %q", ip)
				}
			}
			if a.MacRequest != "" {
				if _, err := parseMAC(a.MacRequest); err != nil {
					t.Errorf("accepted MAC %q", a.MacRequest)
				}
			}
			for _, pm := range a.PortMappingsRequest {
				if pm.HostPort < 1 || pm.HostPort > 65535 || pm.ContainerPort < 1 || pm.ContainerPort > 65535 {
					t.Errorf("accepted port mapping %+v", pm)
				}
			}
			if a.DefaultRoute() {
				defaultRoutes++
			}
		}
		if defaultRoutes > 1 {
			t.Errorf("accepted %d default routes", defaultRoutes)
		}
		err := AssignInterfaces(atts, nil)
		if (err != nil) != asksForLo {
			t.Fatalf("assign: %v", err)
		}
		if err != nil {
			return
		}
		seen := map[string]bool{}
		var entries []nadv1.NetworkStatus
		for i := range atts {
			a := &atts[i]
			if seen[a.InterfaceRequest] || ValidInterfaceName(a.InterfaceRequest) != nil {
				t.Errorf("interface %q assigned twice or invalid", a.InterfaceRequest)
			}
			seen[a.InterfaceRequest] = true
			inv, err := BuildInvocation(a, permissive)
			if err != nil {
				t.Fatalf("invocation: %v", err)
			}
			if _, err := json.Marshal(inv.CapabilityArgs); err != nil {
				t.Errorf("runtimeConfig does not encode: %v", err)
			}
			st, err := AttachmentStatus(a, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			entries = append(entries, st)
		}
		value, err = EncodeNetworkStatus(entries)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		back, err := DecodeNetworkStatus(value)
		if err != nil || len(back) != len(entries) {
			t.Fatalf("status %s decodes as %d entries, %v", value, len(back), err)
		}
	})
}

func mustList(t testing.TB, config string) *libcni.NetworkConfigList {
	c, err := LoadConfig(nad("ns", "net", config), "")
	if err != nil {
		t.Fatal(err)
	}
	return c.List
}

// FuzzLoadConfig: any spec.config, or file on disk, loads without
// panicking, and is judged (its host objects included) within
// boundstest.Budget, saying at most bounds.MessageBytes; a configuration
// that loads is one libcni reads back the same,
// with a name, a cniVersion libcni runs and plugin types that are file
// names; an invocation built from it has no runtimeConfig of its own.
func FuzzLoadConfig(f *testing.F) {
	files, _ := filepath.Glob("testdata/nad/*.yaml")
	for _, file := range files {
		f.Add(readNAD(f, filepath.Base(file)).Spec.Config, false)
	}
	disk, _ := filepath.Glob("testdata/netd/*")
	for _, file := range disk {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(string(data), true)
		}
	}
	for _, seed := range []string{
		`{"cniVersions": ["0.4.0", "1.1.0", "x"], "plugins": [{"type": "bridge"}]}`,
		`{"cniVersion": "0.2.0", "plugins": [{"type": "a", "capabilities": {"mac": true}, "runtimeConfig": {"mac": "x"}, "args": {"cni": 1}}]}`,
		`{"name": null, "type": "x", "cniVersion": ""}`, `{"plugins": null}`, `{"plugins": [1]}`, `{"loadOnlyInlinedPlugins": true}`,
		`{"cniVersion": "1.0.0", "type": "t", "runtimeConfig": 1, "args": {"cni": {"a": 1}}}`, `[]`, `null`, ``, `{} {}`,
	} {
		f.Add(seed, false)
	}
	plugin := `{"type": "macvlan", "master": "eth0"}`
	for _, n := range []int{0, 1} {
		f.Add(`{"cniVersion": "1.0.0", "plugins": [`+repeatList(plugin, ",", bounds.Plugins+n)+`]}`, false)
		f.Add(`{"cniVersion": "1.0.0", "type": "macvlan", "a": [`+repeatList(`"/a"`, ",", bounds.Items+n)+`]}`, false)
		var lists []string
		for i := range 40 {
			lists = append(lists, fmt.Sprintf(`"l%d": [%s]`, i, repeatList(`"/a"`, ",", 250)))
		}
		doc := `{"cniVersion": "1.0.0", "type": "macvlan", ` + strings.Join(lists, ", ") + `}`
		f.Add(doc[:len(doc)-1]+strings.Repeat(" ", bounds.NetworkConfigBytes-len(doc)+n)+"}", false)
	}
	supported := version.All.SupportedVersions()
	// One directory for the inputs on disk, written over by each: a
	// worker runs one input at a time.
	confDir := f.TempDir()
	f.Fuzz(func(t *testing.T, config string, onDisk bool) {
		n := nad("ns", "net", config)
		dir := ""
		if onDisk {
			// The input as a list and as a configuration in a directory;
			// the name to look for is the input's, when it has one.
			dir = confDir
			for _, file := range []string{"00-fuzz.conflist", "01-fuzz.conf"} {
				if err := os.WriteFile(filepath.Join(dir, file), []byte(config), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var named struct {
				Name string `json:"name"`
			}
			_ = json.Unmarshal([]byte(config), &named)
			if named.Name != "" {
				n.Name = named.Name
			}
			n.Spec.Config = ""
		}
		var c *Config
		var err, hostErr error
		boundstest.Check(t, func() string {
			if c, err = LoadConfig(n, dir); err != nil {
				return err.Error()
			}
			if hostErr = (Policy{}).HostObjects(c, false); hostErr != nil {
				return hostErr.Error()
			}
			return ""
		})
		if err != nil {
			if !strings.Contains(err.Error(), "NetworkAttachmentDefinition") {
				t.Errorf("error %q does not name the object", err)
			}
			return
		}
		l := c.List
		if l.Name == "" || !slices.Contains(supported, l.CNIVersion) || len(l.Plugins) == 0 {
			t.Fatalf("loaded %q, version %q, %d plugins", l.Name, l.CNIVersion, len(l.Plugins))
		}
		if !onDisk && l.Name != n.Name && !strings.Contains(config, `"name"`) {
			t.Errorf("name %q, not the object's", l.Name)
		}
		for _, p := range l.Plugins {
			if v1alpha1.ValidCNIPluginType(p.Network.Type) != nil {
				t.Errorf("plugin type %q", p.Network.Type)
			}
		}
		// The host objects a spec.config names: a refusal is ErrHostObject
		// (never a parse error: the plugins were read already); the
		// operator's own configurations are never refused.
		if hostErr != nil && (onDisk || !errors.Is(hostErr, ErrHostObject)) {
			t.Errorf("HostObjects of a configuration from %s: %v", c.Source, hostErr)
		}
		again, err := libcni.NetworkConfFromBytes(l.Bytes)
		if err != nil || again.Name != l.Name || again.CNIVersion != l.CNIVersion {
			t.Fatalf("bytes %s read as %+v, %v", l.Bytes, again, err)
		}
		a := &Attachment{Index: 0}
		a.Namespace, a.Name, a.InterfaceRequest = "ns", "net", "net1"
		a.CNIArgs = &map[string]any{"k": "v"}
		inv, err := BuildInvocation(a, l)
		if err != nil {
			return // args that are not objects
		}
		for _, p := range inv.List.Plugins {
			var conf map[string]any
			if err := json.Unmarshal(p.Bytes, &conf); err != nil {
				t.Fatal(err)
			}
			if _, ok := conf["runtimeConfig"]; ok {
				t.Errorf("a runtimeConfig is left: %s", p.Bytes)
			}
			args, _ := conf["args"].(map[string]any)
			if cni, _ := args["cni"].(map[string]any); cni["k"] != "v" {
				t.Errorf("no cni-args: %s", p.Bytes)
			}
		}
	})
}
