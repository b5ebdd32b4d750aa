//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// specTestdata holds the examples of the Network Plumbing WG multi-network
// standard v1.3, verbatim.
const specTestdata = "dra/npwg/testdata"

// The host links of the examples. The standard's bridge, "br0", would be
// the machine's: the test's links carry its prefix.
const (
	specBridge     = "fpnsbr0"
	specDiskBridge = "fpnsbr1" // of §3.2.4's on-disk configuration
	specMaster     = "fpnsm0a" // the macvlan networks' master
	specMasterPeer = "fpnsm0b"
)

// specStandIns are the plugins of the standard's examples that are no
// reference plugin: cnirecord runs under their names.
var specStandIns = []string{"awesome-plugin", "port-forwarding"}

// TestNPWGSpec runs the standard's own examples through fastpathd --npwg on
// the real node: the NetworkAttachmentDefinitions of §3.2 (a config, a
// configlist, a "thick" config whose name is injected, and one that names
// an on-disk configuration), the selection annotations of §4.1.1 (a comma
// list reaching another namespace's network), §4.1.2 (a JSON list asking
// for ips and a mac), §4.2.2 (one network twice), an element naming its
// interface and §4.1.2.1.9 (default-route); the pod's network-status in the
// shape of §5.4's example; and §7.2: a network failing its ADD leaves
// nothing of the networks added before it. Plugins are the bed's reference
// plugins and cnirecord, which records what it is given (§3.4.2: the
// injected name; §7.5: no runtimeConfig for a plugin that does not declare
// the capability).
func TestNPWGSpec(t *testing.T) {
	ctx, cancel := context.WithTimeout(klog.NewContext(t.Context(), klog.Background()), 10*time.Minute)
	t.Cleanup(cancel)
	r := newSpecRig(t)
	d := newDaemon(t, 26196, "--npwg", "--cni-bin-dir", bed.Config().CNIBinDir()+","+r.binDir(),
		"--cni-plugins", strings.Join(append([]string{"bridge", "host-local", "macvlan", "tuning"}, specStandIns...), ","))
	// §4.1.1's other-ns/net-c: pods of every namespace may select the
	// networks of other-ns (--npwg-allowed-namespaces).
	d.values["npwg"].(map[string]any)["allowedNamespaces"] = []any{"other-ns"}
	// §3.2.4's object without a config, in namespace default, gets the
	// operator's on-disk configuration (--npwg-conf-namespaces); one of
	// other-ns does not.
	d.values["npwg"].(map[string]any)["confNamespaces"] = []any{"default"}
	d.start(t, ctx)
	t.Cleanup(func() { d.stop(t) })
	r.d = d

	// The networks of §4's examples. The standard leaves their
	// configuration open; each is a macvlan on the test's veth with
	// host-local addresses in the test's directory. net-b asks for what
	// §4.1.2 needs: "ips" is host-local's capability (the static plugin
	// takes only addresses with a prefix length, and §4.1.2's 1.2.3.4 has
	// none), "mac" tuning's; its range sets give every attachment an
	// address of 1.2.3.0/24 and one of 10.0.0.0/24, whose 10.0.0.1 is
	// §4.1.2.1.9's gateway; its dns is §5.4's. A cnirecord that declares
	// no capability ends net-a and net-b: it records that no runtimeConfig
	// reaches it, and it sees the results of the plugins before it.
	specNAD(t, ctx, "default", nadDoc("net-a", `{"cniVersion": "1.0.0", "name": "net-a", "plugins": [`+
		r.macvlan("10.97.1.0/24")+`, {"type": "port-forwarding"}]}`))
	specNAD(t, ctx, "default", nadDoc("net-b", fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "net-b", "plugins": [
		{"type": "macvlan", "master": %q, "mode": "bridge", "capabilities": {"ips": true},
		 "dns": {"nameservers": ["192.0.2.1", "2001:db8:4860::8888"], "search": ["eng.example.com", "example.com"]},
		 "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "1.2.3.0/24"}], [{"subnet": "10.0.0.0/24"}]]}},
		{"type": "tuning", "capabilities": {"mac": true}},
		{"type": "port-forwarding"}]}`, specMaster, r.ipamDir())))
	specNamespace(t, ctx, "other-ns")
	specNAD(t, ctx, "other-ns", nadDoc("net-c", `{"cniVersion": "1.0.0", "name": "net-c", "plugins": [`+r.macvlan("10.97.3.0/24")+`]}`))

	t.Run("examples", func(t *testing.T) {
		t.Run("3.2 NetworkAttachmentDefinitions", func(t *testing.T) {
			t.Parallel()
			r.nadExamples(t, ctx)
		})
		t.Run("4 selection and 5 status", func(t *testing.T) {
			t.Parallel()
			r.selectionExamples(t, ctx)
		})
	})
	t.Run("7.2 a failed network leaves nothing", func(t *testing.T) { r.failedAttach(t, ctx) })
	t.Run("a network naming objects of the node", func(t *testing.T) { r.hostObjects(t, ctx) })

	// Every pod is gone: every address is back, and the claim store has
	// no pod's NPWG record.
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return len(ipamAllocations(t, r.ipamDir())) == 0 && npwgRecords(t, d, "") == 0, nil
	}); err != nil {
		t.Errorf("every pod is gone, and host-local addresses %v are still allocated, %d NPWG records in the claim store",
			ipamAllocations(t, r.ipamDir()), npwgRecords(t, d, ""))
	}
}

// specRig is what the examples run with: the daemon, the host links, the
// plugins' directory and their records, the addresses' directory.
type specRig struct {
	d   *daemon
	dir string
}

func (r *specRig) binDir() string     { return filepath.Join(r.dir, "bin") }
func (r *specRig) recordsDir() string { return filepath.Join(r.dir, "records") }

// ipamDir is host-local's dataDir of every example: not the machine's
// /var/lib/cni/networks (nor §3.2.1's /mnt/cluster-ipam).
func (r *specRig) ipamDir() string { return filepath.Join(r.dir, "ipam") }

// confDir is the daemon's --npwg-conf-dir.
func (r *specRig) confDir() string { return r.d.values["npwg"].(map[string]any)["confDir"].(string) }

// macvlan is the configuration of a macvlan plugin on the test's veth with
// host-local addresses of subnet.
func (r *specRig) macvlan(subnet string) string {
	return fmt.Sprintf(`{"type": "macvlan", "master": %q, "mode": "bridge", "ipam": {"type": "host-local", "subnet": %q, "dataDir": %q}}`,
		specMaster, subnet, r.ipamDir())
}

func newSpecRig(t *testing.T) *specRig {
	t.Helper()
	// Links of the test's names that a run killed before its cleanup left.
	for _, name := range []string{specBridge, specDiskBridge, specMaster} {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	}
	master := hostVethNamed(t, specMaster, specMasterPeer)
	if err := netlink.LinkSetUp(master); err != nil {
		t.Fatal(err)
	}
	// The bridge plugin makes §3.2's bridges and leaves them, as it leaves
	// every bridge.
	t.Cleanup(func() {
		for _, name := range []string{specBridge, specDiskBridge} {
			if l, err := netlink.LinkByName(name); err == nil {
				if err := netlink.LinkDel(l); err != nil {
					t.Errorf("delete bridge %s: %v", name, err)
				}
			}
		}
	})
	r := &specRig{dir: t.TempDir()}
	for _, dir := range []string{r.binDir(), r.recordsDir(), r.ipamDir()} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := cniRecordBinary(t)
	for _, name := range specStandIns {
		if err := os.Link(bin, filepath.Join(r.binDir(), name)); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

var (
	cniRecordOnce sync.Once
	cniRecordBin  string
	cniRecordErr  error
)

// cniRecordBinary builds the cnirecord plugin, once per run, in the run's
// working directory.
func cniRecordBinary(t *testing.T) string {
	t.Helper()
	cniRecordOnce.Do(func() {
		cniRecordBin = filepath.Join(workDir, "cnirecord", "cnirecord")
		cmd := exec.Command("go", "build", "-trimpath", "-o", cniRecordBin, "./test/cnirecord")
		cmd.Dir = bed.Config().RepoDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			cniRecordErr = fmt.Errorf("build the cnirecord plugin: %w\n%s", err, out)
		}
	})
	if cniRecordErr != nil {
		t.Fatal(cniRecordErr)
	}
	return cniRecordBin
}

// nadExamples: §3.2.1's config and §3.2.2's configlist attached together;
// §3.2.3's thick plugin, given the object's name (§3.4.2); §3.2.4's object
// without a config, whose configuration is the file of its name in
// --npwg-conf-dir (§3.4.1) for a namespace of --npwg-conf-namespaces, and
// is refused in another. The three are named a-bridge-network, as in the
// standard: each example replaces the one before.
func (r *specRig) nadExamples(t *testing.T, ctx context.Context) {
	// §3.2.1 with the test's bridge and dataDir; §3.2.2 with the same
	// bridge, host-local's state in the test's directory (the standard's
	// has none: the machine's /var/lib/cni/networks), and a subnet of its
	// own: the standard's two networks share 192.168.5.0/24, and two
	// host-local stores would give the pod 192.168.5.2 twice.
	config321 := specExample(t, "nad/spec-3.2.1-config.yaml",
		`"bridge": "br0"`, fmt.Sprintf(`"bridge": %q`, specBridge),
		`"dataDir": "/mnt/cluster-ipam"`, fmt.Sprintf(`"dataDir": %q`, r.ipamDir()))

	t.Run("3.2.1 config and 3.2.2 configlist", func(t *testing.T) {
		specNAD(t, ctx, "default", config321)
		specNAD(t, ctx, "default", specExample(t, "nad/spec-3.2.2-configlist.yaml",
			`"bridge": "br0"`, fmt.Sprintf(`"bridge": %q`, specBridge),
			`"subnet": "192.168.5.0/24"`, fmt.Sprintf(`"subnet": "192.168.6.0/24", "dataDir": %q`, r.ipamDir())))
		pod := specPod(t, ctx, "e2e-npwg-spec-bridges", "a-bridge-network,another-bridge-network")
		logs, uid := specRunning(t, ctx, pod, "net2")
		wantInterface(t, logs, "net1", "192.168.5.")
		wantInterface(t, logs, "net2", "192.168.6.")
		wantBridgeGateway(t, specBridge, "192.168.5.1/24")
		// The chain ran in order: port-forwarding had bridge's result,
		// then tuning set its sysctl in the pod.
		rec := r.record(t, "port-forwarding", "ADD", pod.Name, "net2")
		if rec.conf["name"] != "another-bridge-network" || rec.conf["prevResult"] == nil {
			t.Errorf("port-forwarding of another-bridge-network was given %s, want the list's name and bridge's prevResult", rec.raw)
		}
		wantNoRuntimeConfig(t, rec)
		if v, err := podSysctl(uid, "net/ipv4/conf/all/log_martians"); err != nil || v != "1" {
			t.Errorf("net.ipv4.conf.all.log_martians in the pod is %q (%v), want tuning's 1", v, err)
		}
		wantStatusNetworks(t, specStatus(t, ctx, pod, 3), "default/a-bridge-network net1", "default/another-bridge-network net2")
	})

	t.Run("3.2.3 thick plugin with the name injected", func(t *testing.T) {
		// §3.4.2.1's example is this object too.
		specNAD(t, ctx, "default", specExample(t, "nad/spec-3.2.3-thick.yaml"))
		pod := specPod(t, ctx, "e2e-npwg-spec-thick", "a-bridge-network")
		specRunning(t, ctx, pod, "eth0")
		rec := r.record(t, "awesome-plugin", "ADD", pod.Name, "net1")
		if rec.conf["name"] != "a-bridge-network" {
			t.Errorf("awesome-plugin was given the name %v, want the object's, a-bridge-network (§3.4.2): %s", rec.conf["name"], rec.raw)
		}
		// Nothing else: no runtimeConfig (§7.5), no prevResult.
		want := map[string]any{"cniVersion": "0.3.0", "type": "awesome-plugin", "name": "a-bridge-network"}
		if !maps.Equal(rec.conf, want) {
			t.Errorf("awesome-plugin was given %s, want the object's config with its name, %v", rec.raw, want)
		}
		// The plugin made no interface and gave no address: the entry
		// has the name and interface it was run with.
		wantStatusNetworks(t, specStatus(t, ctx, pod, 2), "default/a-bridge-network net1")
	})

	t.Run("3.2.4 configuration on disk found by name", func(t *testing.T) {
		// §3.2.1's configuration in a file of the conf dir, with a bridge
		// and a subnet of its own to tell it from the object's config (the
		// bridge plugin gives a bridge one gateway address of a family).
		var nad struct {
			Spec struct {
				Config string `json:"config"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(config321), &nad); err != nil {
			t.Fatal(err)
		}
		onDisk := strings.NewReplacer(specBridge, specDiskBridge, "192.168.5.0/24", "192.168.7.0/24").Replace(nad.Spec.Config)
		file := filepath.Join(r.confDir(), "a-bridge-network.conf")
		if err := os.WriteFile(file, []byte(onDisk), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(file) })
		specNAD(t, ctx, "default", specExample(t, "nad/spec-3.2.4-reference.yaml"))
		pod := specPod(t, ctx, "e2e-npwg-spec-on-disk", "a-bridge-network")
		logs, _ := specRunning(t, ctx, pod, "net1")
		wantInterface(t, logs, "net1", "192.168.7.")
		wantBridgeGateway(t, specDiskBridge, "192.168.7.1/24")
		wantStatusNetworks(t, specStatus(t, ctx, pod, 2), "default/a-bridge-network net1")

		// The same object in other-ns, which pods may select but which
		// may not use the operator's configurations: refused, naming the
		// configuration it would have had and the flag.
		specNAD(t, ctx, "other-ns", specExample(t, "nad/spec-3.2.4-reference.yaml"))
		refused := specPod(t, ctx, "e2e-npwg-spec-on-disk-other", "other-ns/a-bridge-network")
		msg, err := waitEvent(ctx, refused.Name, "other-ns/a-bridge-network")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"NetworkAttachmentDefinition other-ns/a-bridge-network: on-disk configuration not allowed",
			`the configuration named "a-bridge-network" in ` + r.confDir(), "--npwg-conf-namespaces: default"} {
			if !strings.Contains(msg, want) {
				t.Errorf("event %q does not say %q", msg, want)
			}
		}
	})
}

// selectionExamples: the pods of §4's examples, started together, in
// namespace default (the standard's are in my-namespace).
func (r *specRig) selectionExamples(t *testing.T, ctx context.Context) {
	pods := map[string]*corev1.Pod{}
	for _, p := range []struct{ name, networks string }{
		{"e2e-npwg-spec-4-1-1", specAnnotation(t, "pods/spec-4.1.1.yaml")},
		{"e2e-npwg-spec-4-1-2", specAnnotation(t, "pods/spec-4.1.2.yaml")},
		{"e2e-npwg-spec-4-2-2", specAnnotation(t, "pods/spec-4.2.2.yaml")},
		// Not in v1.3: Multus' way of naming the interface in a comma list.
		{"e2e-npwg-spec-at", "net-a@eth1"},
		{"e2e-npwg-spec-4-1-2-1-9", specAnnotation(t, "pods/spec-4.1.2.1.9.1.yaml")},
	} {
		pods[p.name] = specPod(t, ctx, p.name, p.networks)
	}

	t.Run("4.1.1 comma list with another namespace's network", func(t *testing.T) {
		pod := pods["e2e-npwg-spec-4-1-1"]
		logs, _ := specRunning(t, ctx, pod, "net3")
		wantInterface(t, logs, "net1", "10.97.1.")
		wantInterface(t, logs, "net2", "1.2.3.", "10.0.0.")
		wantInterface(t, logs, "net3", "10.97.3.")
		wantStatusNetworks(t, specStatus(t, ctx, pod, 4), "default/net-a net1", "default/net-b net2", "other-ns/net-c net3")
	})

	t.Run("4.1.2 JSON list with ips and mac, 5.4 status, 7.5 runtimeConfig", func(t *testing.T) {
		pod := pods["e2e-npwg-spec-4-1-2"]
		logs, _ := specRunning(t, ctx, pod, "net3")
		wantInterface(t, logs, "net1", "10.97.1.")
		wantInterface(t, logs, "net2", "aa:bb:cc:dd:ee:ff", "1.2.3.4/24", "10.0.0.")
		wantInterface(t, logs, "net3", "10.97.3.")
		entries := specStatus(t, ctx, pod, 4)
		wantStatusNetworks(t, entries, "default/net-a net1", "default/net-b net2", "other-ns/net-c net3")
		wantStatusShape(t, entries)
		if st := entries[2]; st.typed.Mac != "aa:bb:cc:dd:ee:ff" || !slices.Contains(st.typed.IPs, "1.2.3.4") {
			t.Errorf("net-b's entry has mac %q and ips %v, want the element's aa:bb:cc:dd:ee:ff and 1.2.3.4", st.typed.Mac, st.typed.IPs)
		}
		// §7.5: the plugin after tuning declares no capability and is
		// given no runtimeConfig; the result it has is tuning's, with
		// the mac the pod asked for.
		rec := r.record(t, "port-forwarding", "ADD", pod.Name, "net2")
		wantNoRuntimeConfig(t, rec)
		if prev, _ := json.Marshal(rec.conf["prevResult"]); !strings.Contains(string(prev), "aa:bb:cc:dd:ee:ff") {
			t.Errorf("port-forwarding after tuning has the previous result %s, want tuning's with the mac aa:bb:cc:dd:ee:ff", prev)
		}
		wantNoRuntimeConfig(t, r.record(t, "port-forwarding", "ADD", pod.Name, "net1"))
	})

	t.Run("4.2.2 one network twice", func(t *testing.T) {
		pod := pods["e2e-npwg-spec-4-2-2"]
		logs, _ := specRunning(t, ctx, pod, "net2")
		wantInterface(t, logs, "net1", "10.97.1.")
		wantInterface(t, logs, "net2", "10.97.1.")
		wantStatusNetworks(t, specStatus(t, ctx, pod, 3), "default/net-a net1", "default/net-a net2")
	})

	t.Run("interface named in a comma list", func(t *testing.T) {
		pod := pods["e2e-npwg-spec-at"]
		logs, _ := specRunning(t, ctx, pod, "eth1")
		wantInterface(t, logs, "eth1", "10.97.1.")
		if line := interfaceLine(logs, "net1"); line != "" {
			t.Errorf("the pod has a net1 (%s) besides the eth1 it asked for", line)
		}
		wantStatusNetworks(t, specStatus(t, ctx, pod, 2), "default/net-a eth1")
	})

	t.Run("4.1.2.1.9 default-route", func(t *testing.T) {
		pod := pods["e2e-npwg-spec-4-1-2-1-9"]
		logs, uid := specRunning(t, ctx, pod, "net2")
		wantInterface(t, logs, "net2", "10.0.0.")
		entries := specStatus(t, ctx, pod, 3)
		wantStatusNetworks(t, entries, "default/net-a net1", "default/net-b net2")
		var gws []string
		_ = json.Unmarshal(entries[2].raw["default-route"], &gws)
		if !slices.Equal(gws, []string{"10.0.0.1"}) {
			t.Errorf("net-b's entry has default-route %v, want the element's [10.0.0.1]", gws)
		}
		routes, err := podDefaultRoutes(uid)
		if err != nil {
			t.Fatal(err)
		}
		// The bed's default network gives its pods no default route: the
		// pod's is the element's or none.
		if len(routes) == 0 || routes[0].gw != "10.0.0.1" || routes[0].dev != "net2" {
			t.Errorf("net-b was attached on net2 with default-route [10.0.0.1], but the pod's IPv4 default routes, best first, are %v: "+
				"want the pod's default route via 10.0.0.1 on net2 (§4.1.2.1.9: the element with default-route carries the pod's default route)", routes)
		}
	})
}

// failedAttach: net-a's ADD succeeds, net-broken's fails (its last plugin
// refuses ADD, after its macvlan and host-local did theirs). The pod does
// not start, its event names the failure, and whenever the kubelet is not
// trying again nothing of either network is left: no address allocated,
// no link on the master, no NPWG record in the claim store, no ADD of
// either network without its DEL.
// hostObjects: a NetworkAttachmentDefinition whose spec.config names a
// device or a directory of the node that the operator did not allow
// (--npwg-host-devices, --npwg-host-paths), in any letter case, or leaves
// out a master that the plugin would then take from the node (its
// default-route interface), fails the pod's sandbox with an error naming
// each field, and no plugin runs.
func (r *specRig) hostObjects(t *testing.T, ctx context.Context) {
	for _, tc := range []struct {
		name, config string
		want         []string
	}{
		{"net-host", `{"cniVersion": "1.0.0", "name": "net-host", "plugins": [{"type": "macvlan", "master": "eth0", "mode": "bridge",
			"ipam": {"type": "host-local", "subnet": "10.97.5.0/24", "dataDir": "/etc/fastpath-e2e-ipam"}}, {"type": "awesome-plugin"}]}`,
			[]string{`plugins[0] (macvlan): master "eth0" is not one of the host devices the operator allows (fp*)`,
				`ipam.dataDir "/etc/fastpath-e2e-ipam" is not under a host directory the operator allows (` + workDir + `)`}},
		{"net-host-case", `{"cniVersion": "1.0.0", "name": "net-host-case", "plugins": [{"type": "macvlan", "Master": "eth0", "mode": "bridge",
			"IPAM": {"type": "host-local", "subnet": "10.97.6.0/24", "DataDir": "` + r.ipamDir() + `"}}, {"type": "awesome-plugin"}]}`,
			[]string{`plugins[0] (macvlan): Master (read by the plugin as master) "eth0" is not one of the host devices the operator allows (fp*)`}},
		{"net-host-default", `{"cniVersion": "1.0.0", "name": "net-host-default", "plugins": [{"type": "macvlan", "mode": "bridge",
			"ipam": {"type": "host-local", "subnet": "10.97.7.0/24", "dataDir": "` + r.ipamDir() + `"}}, {"type": "awesome-plugin"}]}`,
			[]string{`plugins[0] (macvlan): master is left out, so macvlan takes the node's default-route interface`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			specNAD(t, ctx, "default", nadDoc(tc.name, tc.config))
			pod := specPod(t, ctx, "e2e-npwg-spec-"+strings.TrimPrefix(tc.name, "net-"), tc.name)
			msg, err := waitEvent(ctx, pod.Name, "default/"+tc.name)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range append([]string{"pod default/" + pod.Name, "names an object of the host"}, tc.want...) {
				if !strings.Contains(msg, want) {
					t.Errorf("event %q does not name %q", msg, want)
				}
			}
			if recs := r.records(t, "awesome-plugin", "ADD", pod.Name, "net1"); len(recs) > 0 {
				t.Errorf("a plugin of the refused network ran: %v", recs)
			}
			if n := npwgRecords(t, r.d, pod.Name); n > 0 {
				t.Errorf("%d NPWG records of the refused pod in the claim store", n)
			}
		})
	}
}

func (r *specRig) failedAttach(t *testing.T, ctx context.Context) {
	specNAD(t, ctx, "default", nadDoc("net-broken", `{"cniVersion": "1.0.0", "name": "net-broken", "plugins": [`+
		r.macvlan("10.97.4.0/24")+`, {"type": "awesome-plugin", "fail": "ADD"}]}`))
	pod := specPod(t, ctx, "e2e-npwg-spec-broken", "net-a,net-broken")
	msg, err := waitEvent(ctx, pod.Name, "default/net-broken")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pod default/" + pod.Name, "interface net2", "CNI ADD", `awesome-plugin: ADD fails`} {
		if !strings.Contains(msg, want) {
			t.Errorf("event %q does not name %q", msg, want)
		}
	}
	r.record(t, "awesome-plugin", "ADD", pod.Name, "net2")

	master, err := netlink.LinkByName(specMaster)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	clean := func() bool {
		left = nil
		for _, network := range []string{"net-a", "net-broken"} {
			for _, a := range ipamAllocations(t, filepath.Join(r.ipamDir(), network)) {
				left = append(left, fmt.Sprintf("%s's address %s", network, a))
			}
		}
		links, _ := netlink.LinkList()
		for _, l := range links {
			if l.Attrs().ParentIndex == master.Attrs().Index && l.Type() == "macvlan" {
				left = append(left, "host link "+l.Attrs().Name+" on "+specMaster)
			}
		}
		if n := npwgRecords(t, r.d, pod.Name); n > 0 {
			left = append(left, fmt.Sprintf("%d NPWG records of the pod in the claim store", n))
		}
		// cnirecord ends both lists: DEL runs it first.
		for _, n := range []struct{ network, plugin, ifName string }{{"net-a", "port-forwarding", "net1"}, {"net-broken", "awesome-plugin", "net2"}} {
			dels := r.records(t, n.plugin, "DEL", pod.Name, n.ifName)
			for _, add := range r.records(t, n.plugin, "ADD", pod.Name, n.ifName) {
				if !slices.ContainsFunc(dels, func(del cniRecord) bool { return del.ContainerID == add.ContainerID }) {
					left = append(left, fmt.Sprintf("%s's ADD in sandbox %s, without a DEL", n.network, add.ContainerID))
				}
			}
		}
		return len(left) == 0
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return clean(), nil
	}); err != nil {
		t.Errorf("while the pod cannot start, its failed attach leaves %v (§7.2)", left)
	}
	if len(r.records(t, "port-forwarding", "ADD", pod.Name, "net1")) == 0 {
		t.Errorf("net-a was never added to the pod: the failure undid nothing")
	}
	p, err := bed.Client().CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ready, _ := specPodReady(p); ready || p.Status.Phase != corev1.PodPending {
		t.Errorf("the pod is %s (ready %v), want it Pending: its networks cannot all be attached", p.Status.Phase, ready)
	}
	if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return clean(), nil
	}); err != nil {
		t.Errorf("the pod is gone and its failed attach left %v", left)
	}
}

// wantBridgeGateway checks that the bridge plugin gave the bridge the
// gateway's address ("isGateway").
func wantBridgeGateway(t *testing.T, bridge, addr string) {
	t.Helper()
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		t.Errorf("bridge %s: %v", bridge, err)
		return
	}
	addrs, err := netlink.AddrList(br, netlink.FAMILY_V4)
	if err != nil || !slices.ContainsFunc(addrs, func(a netlink.Addr) bool { return a.IPNet.String() == addr }) {
		t.Errorf("bridge %s has addresses %v (%v), want the gateway %s (isGateway)", bridge, addrs, err, addr)
	}
}

// nadDoc is a NetworkAttachmentDefinition with the config (JSON, written
// on one line).
func nadDoc(name, config string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(config)); err != nil {
		panic(fmt.Sprintf("the config of %s: %v", name, err))
	}
	return fmt.Sprintf("apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata:\n  name: %s\nspec:\n  config: '%s'\n", name, b.String())
}

// specExample is a file of the standard's examples with each old string
// of oldNew replaced by the new one after it; each must be in the file.
func specExample(t *testing.T, file string, oldNew ...string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bed.Config().RepoDir, specTestdata, file))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for i := 0; i+1 < len(oldNew); i += 2 {
		if !strings.Contains(s, oldNew[i]) {
			t.Fatalf("%s has no %s to replace", file, oldNew[i])
		}
		s = strings.ReplaceAll(s, oldNew[i], oldNew[i+1])
	}
	return s
}

// specAnnotation is the selection annotation of a pod of the standard's
// examples.
func specAnnotation(t *testing.T, file string) string {
	t.Helper()
	var pod struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(specExample(t, file)), &pod); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	v, ok := pod.Metadata.Annotations[nadv1.NetworkAttachmentAnnot]
	if !ok {
		t.Fatalf("%s has no %s annotation", file, nadv1.NetworkAttachmentAnnot)
	}
	return v
}

// specNamespace creates the namespace, or waits until one of that name
// being deleted is gone and creates it then, and deletes it when the test
// ends.
func specNamespace(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	c := bed.Client().CoreV1().Namespaces()
	var createErr error
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		_, createErr = c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(createErr) {
			ns, err := c.Get(ctx, name, metav1.GetOptions{})
			return err == nil && ns.DeletionTimestamp == nil, nil
		}
		return createErr == nil, nil
	}); err != nil {
		t.Fatalf("create namespace %s: %v", name, createErr)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_ = c.Delete(ctx, name, metav1.DeleteOptions{})
		if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := c.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Errorf("namespace %s not gone: %v", name, err)
		}
	})
}

// specNAD creates the NetworkAttachmentDefinition of doc in the namespace,
// replacing one of its name a killed run left, and deletes it when the
// test ends.
func specNAD(t *testing.T, ctx context.Context, namespace, doc string) {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	c := dynamicClient(t).Resource(nads).Namespace(namespace)
	// The CRD the chart installed may take a moment to be served.
	var createErr error
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, createErr = c.Create(ctx, u.DeepCopy(), metav1.CreateOptions{FieldValidation: "Strict"})
		if apierrors.IsAlreadyExists(createErr) {
			_ = c.Delete(ctx, u.GetName(), metav1.DeleteOptions{})
		}
		return createErr == nil, nil
	}); err != nil {
		t.Fatalf("create NetworkAttachmentDefinition %s/%s: %v", namespace, u.GetName(), createErr)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = c.Delete(ctx, u.GetName(), metav1.DeleteOptions{})
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := c.Get(ctx, u.GetName(), metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	})
}

// specPod creates a pod in namespace default that prints its interfaces,
// selecting networks, and deletes it when the test ends.
func specPod(t *testing.T, ctx context.Context, name, networks string) *corev1.Pod {
	t.Helper()
	pod := testbed.WorkloadPod("default", name, "ifaces")
	pod.Annotations = map[string]string{nadv1.NetworkAttachmentAnnot: networks}
	created, err := bed.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := bed.DeletePod(ctx, "default", name); err != nil {
			t.Error(err)
		}
	})
	return created
}

func specPodReady(p *corev1.Pod) (bool, error) {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return false, fmt.Errorf("pod %s ended in phase %s: %s", p.Name, p.Status.Phase, p.Status.Message)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true, nil
		}
	}
	return false, nil
}

// specRunning waits until the pod is ready and has printed its interfaces
// up to last, and returns what it printed and its UID.
func specRunning(t *testing.T, ctx context.Context, pod *corev1.Pod, last string) (string, string) {
	t.Helper()
	p, err := bed.WaitPod(ctx, "default", pod.Name, 2*time.Minute, specPodReady)
	if err != nil {
		t.Fatal(err)
	}
	logs, err := bed.WaitPodLog(ctx, "default", pod.Name, "\n"+last+" ", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return logs, string(p.UID)
}

// wantInterface checks that the pod printed the interface with each of
// want (its MAC, its addresses) on its line.
func wantInterface(t *testing.T, logs, name string, want ...string) {
	t.Helper()
	line := interfaceLine(logs, name)
	if line == "" {
		t.Errorf("the pod has no interface %s:\n%s", name, logs)
		return
	}
	for _, w := range want {
		if !strings.Contains(line, w) {
			t.Errorf("the pod's interface %q lacks %q", line, w)
		}
	}
}

// statusEntry is an entry of a pod's network-status, as written and as
// the standard's Go type reads it.
type statusEntry struct {
	raw   map[string]json.RawMessage
	typed nadv1.NetworkStatus
}

// specStatus waits until the pod's network-status has n entries and
// returns them.
func specStatus(t *testing.T, ctx context.Context, pod *corev1.Pod, n int) []statusEntry {
	t.Helper()
	var value string
	var entries []statusEntry
	var last *corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := bed.Client().CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		value = p.Annotations[nadv1.NetworkStatusAnnot]
		var raws []json.RawMessage
		if json.Unmarshal([]byte(value), &raws) != nil || len(raws) < n {
			return false, nil
		}
		entries = entries[:0]
		for _, raw := range raws {
			var e statusEntry
			if err := json.Unmarshal(raw, &e.raw); err != nil {
				return false, err
			}
			if err := json.Unmarshal(raw, &e.typed); err != nil {
				return false, err
			}
			entries = append(entries, e)
		}
		return true, nil
	}); err != nil {
		t.Fatalf("pod %s's network-status %q never had %d entries: %v", pod.Name, value, n, err)
	}
	if len(entries) != n {
		t.Errorf("pod %s's network-status has %d entries, want %d: %s", pod.Name, len(entries), n, value)
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, []byte(value))
	t.Logf("pod %s's network-status: %s", pod.Name, compact.String())
	// Multus's own reader (the standard's Go library) reads the same.
	multus, err := nadutils.GetNetworkStatus(last)
	if err != nil || len(multus) != len(entries) {
		t.Errorf("pod %s's network-status read by nadutils.GetNetworkStatus: %d entries, %v; want %d", pod.Name, len(multus), err, len(entries))
	}
	for i := range min(len(multus), len(entries)) {
		if m, e := multus[i], entries[i].typed; m.Name != e.Name || m.Interface != e.Interface || m.Default != e.Default || !slices.Equal(m.IPs, e.IPs) {
			t.Errorf("pod %s's network-status entry %d read by nadutils: %+v, want %+v", pod.Name, i, m, e)
		}
	}
	// And as §5.3's text defines an entry: "name" and "default"
	// required, no key but §5.3's, those in reverse domain name notation,
	// and "gateway" (the deviation docs/conformance.md lists).
	specKeys := []string{"name", "interface", "ips", "mac", "mtu", "default", "dns", "default-route", "device-info", "gateway"}
	for i, e := range entries {
		var name string
		var isDefault *bool
		if json.Unmarshal(e.raw["name"], &name) != nil || name == "" || json.Unmarshal(e.raw["default"], &isDefault) != nil || isDefault == nil {
			t.Errorf("pod %s's network-status entry %d: %s: want a \"name\" and a boolean \"default\" (§5.3.1, §5.3.6: required)", pod.Name, i, slices.Sorted(maps.Keys(e.raw)))
		}
		for k := range e.raw {
			if !slices.Contains(specKeys, k) && !strings.Contains(k, ".") {
				t.Errorf("pod %s's network-status entry %d: key %q is not §5.3's nor in reverse domain name notation", pod.Name, i, k)
			}
		}
	}
	return entries
}

// wantStatusNetworks checks that the entries are the default network's,
// first, then those of the networks ("namespace/name interface") in the
// annotation's order.
func wantStatusNetworks(t *testing.T, entries []statusEntry, networks ...string) {
	t.Helper()
	got := make([]string, 0, len(entries))
	for _, e := range entries {
		got = append(got, e.typed.Name+" "+e.typed.Interface)
	}
	want := append([]string{"default/cluster-network eth0"}, networks...)
	if !slices.Equal(got, want) {
		t.Errorf("network-status has the entries %q, want %q", got, want)
	}
	if len(entries) > 0 && !entries[0].typed.Default {
		t.Errorf("network-status's first entry, %s, is not marked default", entries[0].typed.Name)
	}
	for _, e := range entries[min(1, len(entries)):] {
		if e.typed.Default {
			t.Errorf("network-status marks %s default too", e.typed.Name)
		}
	}
}

// wantStatusShape checks the §4.1.2 pod's network-status against §5.4's
// example: the default network's entry has its keys (but its mac and
// default-route, which the cluster default network's plugin knows, not
// fastpath), net-b's those of the example's entry with dns, with the same
// dns.
func wantStatusShape(t *testing.T, entries []statusEntry) {
	t.Helper()
	var example struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal([]byte(specExample(t, "status/spec-5.4-single-gateway.yaml")), &example); err != nil {
		t.Fatal(err)
	}
	var want []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(example.Metadata.Annotations[nadv1.NetworkStatusAnnot]), &want); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]json.RawMessage, but ...string) []string {
		var out []string
		for k := range m {
			if !slices.Contains(but, k) {
				out = append(out, k)
			}
		}
		slices.Sort(out)
		return out
	}
	for _, c := range []struct {
		got, want map[string]json.RawMessage
		but       []string
	}{
		{entries[0].raw, want[0], []string{"mac", "default-route"}},
		{entries[2].raw, want[1], nil},
	} {
		for _, k := range keys(c.want, c.but...) {
			if _, ok := c.got[k]; !ok {
				t.Errorf("network-status entry with %s lacks %q, which §5.4's entry with %s has", keys(c.got), k, keys(c.want))
			}
		}
	}
	if got, want := entries[2].typed.DNS, (nadv1.DNS{Nameservers: []string{"192.0.2.1", "2001:db8:4860::8888"}, Search: []string{"eng.example.com", "example.com"}}); !slices.Equal(got.Nameservers, want.Nameservers) || !slices.Equal(got.Search, want.Search) {
		t.Errorf("net-b's entry has dns %+v, want §5.4's %+v", got, want)
	}
	if ips := entries[0].typed.IPs; len(ips) == 0 || net.ParseIP(ips[0]) == nil {
		t.Errorf("the default network's entry has ips %q, want the pod's", ips)
	}
}

// cniRecord is a call cnirecord recorded.
type cniRecord struct {
	Command     string          `json:"command"`
	ContainerID string          `json:"containerID"`
	IfName      string          `json:"ifName"`
	Args        string          `json:"args"`
	Config      json.RawMessage `json:"config"`
	conf        map[string]any  // Config decoded
	raw         string          // Config as written
}

// records are the calls of command cnirecord recorded under the plugin
// name for the pod's interface.
func (r *specRig) records(t *testing.T, plugin, command, pod, ifName string) []cniRecord {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(r.recordsDir(), fmt.Sprintf("%s.%s.*.%s.json", plugin, command, ifName)))
	if err != nil {
		t.Fatal(err)
	}
	var out []cniRecord
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rec cniRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !slices.Contains(strings.Split(rec.Args, ";"), "K8S_POD_NAME="+pod) {
			continue
		}
		rec.raw = string(rec.Config)
		if err := json.Unmarshal(rec.Config, &rec.conf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, rec)
	}
	return out
}

// record is the call of command cnirecord recorded under the plugin name
// for the pod's interface.
func (r *specRig) record(t *testing.T, plugin, command, pod, ifName string) cniRecord {
	t.Helper()
	recs := r.records(t, plugin, command, pod, ifName)
	if len(recs) == 0 {
		t.Fatalf("%s was never called %s for pod %s's %s", plugin, command, pod, ifName)
	}
	return recs[0]
}

// wantNoRuntimeConfig checks that a plugin that declares no capability was
// given no runtimeConfig (§7.5).
func wantNoRuntimeConfig(t *testing.T, rec cniRecord) {
	t.Helper()
	if _, ok := rec.conf["runtimeConfig"]; ok {
		t.Errorf("%s on %s declares no capability and was given a runtimeConfig: %s", rec.conf["type"], rec.IfName, rec.raw)
	}
}

// npwgRecords counts the NPWG records of the pod (of every pod, with "")
// in the daemon's claim store.
func npwgRecords(t *testing.T, d *daemon, pod string) int {
	t.Helper()
	cls, _, err := claims.Read(d.checkpoint())
	if err != nil {
		t.Fatalf("checkpoint %s: %v", d.checkpoint(), err)
	}
	n := 0
	for _, c := range cls {
		if c.Driver == claims.DriverNPWG && (pod == "" || c.Pod.Name == pod) {
			n++
		}
	}
	return n
}

// podSysctl reads a sysctl (its path below /proc/sys) in the network
// namespace of the pod with this UID.
func podSysctl(uid, name string) (string, error) {
	pid := podProcess(uid, nil)
	if pid == 0 {
		return "", fmt.Errorf("no process of pod %s", uid)
	}
	out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "cat", filepath.Join("/proc/sys", name)).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// podRoute is a default route of a pod.
type podRoute struct {
	gw, dev string
	metric  int
}

func (r podRoute) String() string {
	return fmt.Sprintf("via %s dev %s metric %d", r.gw, r.dev, r.metric)
}

// podDefaultRoutes are the IPv4 default routes of the main table in the
// network namespace of the pod with this UID, best (lowest metric) first.
func podDefaultRoutes(uid string) ([]podRoute, error) {
	pid := podProcess(uid, nil)
	if pid == 0 {
		return nil, fmt.Errorf("no process of pod %s", uid)
	}
	ns, err := netns.GetFromPath(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, err
	}
	var out []podRoute
	for _, rt := range routes {
		if rt.Dst != nil {
			if ones, _ := rt.Dst.Mask.Size(); ones != 0 {
				continue
			}
		}
		pr := podRoute{metric: rt.Priority, dev: strconv.Itoa(rt.LinkIndex)}
		if rt.Gw != nil {
			pr.gw = rt.Gw.String()
		}
		if l, err := h.LinkByIndex(rt.LinkIndex); err == nil {
			pr.dev = l.Attrs().Name
		}
		out = append(out, pr)
	}
	slices.SortStableFunc(out, func(a, b podRoute) int { return a.metric - b.metric })
	return out, nil
}
