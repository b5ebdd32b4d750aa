package dra

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

func testCNIContext() cniContext {
	client := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vlans"}, Data: map[string]string{"eth7": "107", "node-a": "10.9.0.0/24"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fastpath-system", Name: "storage-net"}, Data: map[string]string{
			"config": "cniVersion: 0.4.0\nplugins:\n- type: macvlan\n  config: {mode: private, ipam: {type: host-local, subnet: 10.11.0.0/16}}\n  arguments:\n  - {fieldPath: master, valueFrom: {attributeRef: name}}\n"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fastpath-system", Name: "misspelt"}, Data: map[string]string{
			"config": "cniVersion: 1.0.0\nPlugins:\n- type: macvlan\n"}},
	)
	return cniContext{ctx: context.Background(), client: client, namespace: "default",
		attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{CNIDriverName + "/name": {StringValue: new("eth7")}},
		slice:      map[string]string{"spec.nodeName": "node-a", "spec.pool.name": "node-a", "spec.driver": CNIDriverName}}
}

var testPolicy = CNIPolicy{Plugins: []string{"macvlan", "host-local", "tuning", "vlan"}, ConfigNamespace: "fastpath-system"}

func decodeCNI(t *testing.T, doc string) v1alpha1.CNIConfig {
	t.Helper()
	cfg, errs := v1alpha1.DecodeCNIConfig([]byte(doc), field.NewPath("parameters"))
	if len(errs) > 0 {
		t.Fatalf("decode: %v", errs)
	}
	return cfg
}

const cniHead = `"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "net1"`

func TestBuildConflist(t *testing.T) {
	for name, tc := range map[string]struct {
		doc  string
		want string // the plugins of the built conflist, as JSON
	}{
		"the design's example": {`{` + cniHead + `, "cniVersion": "1.0.0", "plugins": [{"type": "macvlan",
			"config": {"mode": "bridge", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.10.1.0/24"}]]}},
			"arguments": [{"fieldPath": "master", "valueFrom": {"attributeRef": "name"}}]}]}`,
			`[{"ipam":{"ranges":[[{"subnet":"10.10.1.0/24"}]],"type":"host-local"},"master":"eth7","mode":"bridge","type":"macvlan"}]`},
		"constant, slice field and ConfigMap keys": {`{` + cniHead + `, "plugins": [{"type": "vlan",
			"config": {"ipam": {"type": "host-local"}},
			"arguments": [{"fieldPath": "master", "value": "bond0"}, {"fieldPath": "mtu", "value": 9000},
				{"fieldPath": "vlanId", "valueFrom": {"configMapKeyRef": {"name": "vlans", "keyFrom": {"attributeRef": "name"}}}},
				{"fieldPath": "ipam.subnet", "valueFrom": {"configMapKeyRef": {"name": "vlans", "keyFrom": {"resourceSliceFieldRef": "spec.nodeName"}}}},
				{"fieldPath": "ipam.note", "valueFrom": {"resourceSliceFieldRef": "spec.nodeName"}}]}]}`,
			`[{"ipam":{"note":"node-a","subnet":"10.9.0.0/24","type":"host-local"},"master":"bond0","mtu":9000,"type":"vlan","vlanId":"107"}]`},
		"an approved config": {`{` + cniHead + `, "configName": "storage-net"}`,
			`[{"ipam":{"subnet":"10.11.0.0/16","type":"host-local"},"master":"eth7","mode":"private","type":"macvlan"}]`},
	} {
		t.Run(name, func(t *testing.T) {
			data, errs := buildConflist(decodeCNI(t, tc.doc), "default-c-r", testPolicy, testCNIContext())
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			var list struct {
				CNIVersion, Name string
				Plugins          json.RawMessage
			}
			if err := json.Unmarshal(data, &list); err != nil {
				t.Fatal(err)
			}
			if list.Name != "default-c-r" || list.CNIVersion == "" {
				t.Errorf("name, cniVersion = %q, %q", list.Name, list.CNIVersion)
			}
			if string(list.Plugins) != tc.want {
				t.Errorf("plugins:\n%s\nwant:\n%s", list.Plugins, tc.want)
			}
		})
	}
}

func TestBuildConflistErrors(t *testing.T) {
	plugin := func(s string) string { return `{` + cniHead + `, "plugins": [` + s + `]}` }
	for name, tc := range map[string]struct{ doc, want string }{
		"plugin not allowed":    {plugin(`{"type": "bridge"}`), `plugins[0].type: Forbidden: plugin type "bridge" is not on this node's allowlist`},
		"IPAM not allowed":      {plugin(`{"type": "macvlan", "config": {"ipam": {"type": "dhcp"}}}`), `plugins[0].config.ipam.type: Forbidden: plugin type "dhcp"`},
		"both configs":          {`{` + cniHead + `, "configName": "storage-net", "plugins": [{"type": "macvlan"}]}`, "configName"},
		"no config":             {`{` + cniHead + `}`, "plugins: Required value"},
		"unknown approved":      {`{` + cniHead + `, "configName": "nope"}`, "no approved config nope in namespace fastpath-system"},
		"misspelt approved":     {`{` + cniHead + `, "configName": "misspelt"}`, "data.config.Plugins: Forbidden: unknown field"},
		"bad ifName":            {`{"apiVersion": "cni.networking.x-k8s.io/v1alpha1", "kind": "CNI", "ifName": "a/b", "plugins": [{"type": "macvlan"}]}`, "ifName"},
		"unknown attribute":     {plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "master", "valueFrom": {"attributeRef": "uplink"}}]}`), "plugins[0].arguments[0].valueFrom.attributeRef: Not found"},
		"unknown slice field":   {plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "master", "valueFrom": {"resourceSliceFieldRef": "spec.devices"}}]}`), "resourceSliceFieldRef: Unsupported value"},
		"missing ConfigMap key": {plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "master", "valueFrom": {"configMapKeyRef": {"name": "vlans", "key": "eth9"}}}]}`), "configMapKeyRef.key: Not found"},
		"type by argument":      {plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "type", "value": "bridge"}]}`), "arguments[0].fieldPath"},
		"type in config":        {plugin(`{"type": "macvlan", "config": {"type": "bridge"}}`), "plugins[0].config.type: Forbidden"},
		"value and valueFrom":   {plugin(`{"type": "macvlan", "arguments": [{"fieldPath": "master", "value": "x", "valueFrom": {"attributeRef": "name"}}]}`), "give value or valueFrom, not both"},
	} {
		t.Run(name, func(t *testing.T) {
			_, errs := buildConflist(decodeCNI(t, tc.doc), "default-c-r", testPolicy, testCNIContext())
			if len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.want) {
				t.Errorf("errors = %v, want %q", errs, tc.want)
			}
		})
	}
	// Decoding is strict.
	if _, errs := v1alpha1.DecodeCNIConfig([]byte(`{`+cniHead+`, "plugin": []}`), field.NewPath("parameters")); len(errs) == 0 ||
		!strings.Contains(errs.ToAggregate().Error(), "parameters.plugin") {
		t.Errorf("unknown field: %v", errs)
	}
}
