package v1alpha1

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// dranetClaim is a config as dranet's users write it (its documentation's
// fields), with a VRF.
const dranetClaim = `{"interface": {"name": "net1", "addresses": ["10.0.0.2/24"], "mtu": 9000, "hardwareAddr": "02:00:00:00:00:01",
  "gsoMaxSize": 196608, "groMaxSize": 196608, "forwarding": true, "arpIgnore": 1, "arpAnnounce": 2, "vrf": {"name": "blue", "table": 200}},
 "routes": [{"destination": "10.9.0.0/16", "gateway": "10.0.0.1", "table": 7}, {"gateway": "10.0.0.1"}, {"destination": "10.0.0.0/24", "source": "10.0.0.2", "scope": 253}],
 "rules": [{"priority": 100, "source": "10.0.0.2", "table": 200}],
 "neighbors": [{"destination": "10.0.0.9", "hardwareAddr": "02:00:00:00:00:09"}],
 "ethtool": {"features": {"tcp-segmentation-offload": true}, "privateFlags": {"rx_cqe_compress": true}}}`

// nativeOfDranet is what dranetClaim says, in fastpath's form.
const nativeOfDranet = `{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "interface": {"name": "net1", "addresses": ["10.0.0.2/24"],
  "mtu": 9000, "mac": "02:00:00:00:00:01", "gsoMaxSize": 196608, "groMaxSize": 196608,
  "sysctls": {"ipv4.forwarding": "1", "ipv6.forwarding": "1", "ipv4.arp_ignore": "1", "ipv4.arp_announce": "2"}, "vrf": {"name": "blue", "table": 200},
  "routes": [{"destination": "10.9.0.0/16", "gateway": "10.0.0.1", "table": 200}, {"destination": "0.0.0.0/0", "gateway": "10.0.0.1", "table": 200},
             {"destination": "10.0.0.0/24", "source": "10.0.0.2", "scope": "link", "table": 200}],
  "rules": [{"priority": 100, "from": "10.0.0.2/32", "table": 200}],
  "neighbors": [{"address": "10.0.0.9", "mac": "02:00:00:00:00:09"}],
  "ethtool": {"features": {"tcp-segmentation-offload": true}, "privateFlags": {"rx_cqe_compress": true}}}}`

func decodeOne(t *testing.T, doc string) (InterfaceConfig, field.ErrorList) {
	t.Helper()
	var c InterfaceConfig
	errs := DecodeInterfaceConfig([]byte(doc), &c, field.NewPath("config"))
	if len(errs) == 0 {
		c.Default("nic")
		errs = c.Validate()
	}
	return c, errs
}

// TestForms: a config in dranet's form and one in dra-driver-sriov's
// decode to what fastpath's own form of them does (a VRF's routes in its
// table, as dranet puts them); what fastpath cannot honour is refused by
// its name in the form; a config without apiVersion and kind that has
// fields of neither is fastpath's, and refused as such.
func TestForms(t *testing.T) {
	got, errs := decodeOne(t, dranetClaim)
	if len(errs) > 0 {
		t.Fatalf("dranet's form: %v", errs)
	}
	want, errs := decodeOne(t, nativeOfDranet)
	if len(errs) > 0 {
		t.Fatalf("the native form: %v", errs)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("dranet's form decodes to\n%+v\nwant\n%+v", *got.Interface, *want.Interface)
	}
	if f := FormOf([]byte(dranetClaim)); f != FormDranet {
		t.Errorf("FormOf = %s", f)
	}
	native, form, errs := Native([]byte(dranetClaim), field.NewPath("config"))
	if len(errs) > 0 || form != FormDranet || !strings.Contains(string(native), `"sysctls":{"ipv4.arp_announce":"2"`) {
		t.Errorf("Native = %s, %s, %v", native, form, errs)
	}

	for doc, want := range map[string]string{
		`{"apiVersion": "sriovnetwork.k8snetworkplumbingwg.io/v1alpha1", "kind": "VfConfig", "ifName": "net1"}`:     `{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "interface": {"name": "net1"}}`,
		`{"apiVersion": "sriovnetwork.k8snetworkplumbingwg.io/v1alpha1", "kind": "VfConfig", "driver": "vfio-pci"}`: `{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig", "mode": "vfio"}`,
		`{"apiVersion": "sriovnetwork.k8snetworkplumbingwg.io/v1alpha1", "kind": "VfConfig", "driver": "default"}`:  `{"apiVersion": "fastpath.dev/v1alpha1", "kind": "InterfaceConfig"}`,
	} {
		got, errs := decodeOne(t, doc)
		w, werrs := decodeOne(t, want)
		if len(errs) > 0 || len(werrs) > 0 || !reflect.DeepEqual(got, w) {
			t.Errorf("%s: %+v (%v), want %+v (%v)", doc, got, errs, w, werrs)
		}
	}

	for doc, want := range map[string]string{
		`{"interface": {"dhcp": true}}`:                                                     "config.interface.dhcp: Forbidden: fastpath runs no DHCP client in the pod",
		`{"interface": {"disableEbpfPrograms": true}}`:                                      "config.interface.disableEbpfPrograms: Forbidden",
		`{"profile": "gold", "interface": {}}`:                                              "config.profile: Forbidden: fastpath has no provider profiles",
		`{"interface": {"vrf": {"name": "v"}}}`:                                             "config.interface.vrf.table: Required value",
		`{"routes": [{"destination": "10.1.0.0/16", "gateway": "10.0.0.1", "scope": 200}]}`: `config.routes[0].scope: Unsupported value: 200: supported values: "0 (universe)", "253 (link)", "254 (host)"`,
		`{"rules": [{"source": "10.0.0", "table": 5}]}`:                                     `config.rules[0].source: Invalid value: "10.0.0": must be an IP address or a CIDR prefix`,
		`{"interface": {"name": "net1", "bogus": 1}}`:                                       `config.interface.bogus: Forbidden: unknown field`,
		`{"mode": "vfio"}`:                                                                  "config.apiVersion: Invalid value: \"/\": want apiVersion fastpath.dev/v1alpha1, kind InterfaceConfig",
		`{"apiVersion": "sriovnetwork.k8snetworkplumbingwg.io/v1alpha1", "kind": "VfConfig", "driver": "vfio-pci", "ifName": "x"}`: "config.ifName: Forbidden: driver vfio-pci",
		`{"apiVersion": "sriovnetwork.k8snetworkplumbingwg.io/v1alpha1", "kind": "VfConfig", "driver": "mlx5_core"}`:               `config.driver: Unsupported value: "mlx5_core"`,
		`{"apiVersion": "sriovnetwork.k8snetworkplumbingwg.io/v1alpha1", "kind": "VfConfig", "addVhostMount": true}`:               "config.addVhostMount: Forbidden",
		`{"apiVersion": "sriovnetwork.k8snetworkplumbingwg.io/v1alpha1", "kind": "VfConfig", "netAttachDefName": "vf-net"}`:        "config.netAttachDefName: Forbidden: fastpath runs a NetworkAttachmentDefinition's plugins for the networks the pod selects",
		`{"apiVersion": "sriovnetwork.k8snetworkplumbingwg.io/v1alpha1", "kind": "VfConfig", "ifName": "net1", "vlan": 100}`:       "config.vlan: Forbidden: unknown field",
	} {
		if _, errs := decodeOne(t, doc); len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), want) {
			t.Errorf("%s: errors %v, want %q", doc, errs, want)
		}
	}
}
