package dataplane

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// loggingPlugin is a CNI plugin (CNI 1.1) that logs each command to calls
// in its directory, with the valid attachments of a GC; STATUS fails while
// not-ready exists there, CHECK while check-fails does.
const loggingPlugin = `#!/bin/sh
dir=$(dirname "$0")
conf=$(cat)
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.1.0","supportedVersions":["0.3.1","0.4.0","1.0.0","1.1.0"]}' ;;
ADD) echo "ADD $CNI_CONTAINERID $CNI_IFNAME" >>"$dir/calls"
     echo '{"cniVersion":"1.1.0","interfaces":[{"name":"'"$CNI_IFNAME"'","sandbox":"'"$CNI_NETNS"'"}],"ips":[{"address":"10.9.9.9/24","interface":0}]}' ;;
DEL) echo "DEL $CNI_CONTAINERID $CNI_IFNAME" >>"$dir/calls" ;;
CHECK) echo "CHECK $CNI_CONTAINERID $CNI_IFNAME" >>"$dir/calls"
     if [ -e "$dir/check-fails" ]; then echo '{"cniVersion":"1.1.0","code":100,"msg":"the interface is gone"}'; exit 1; fi ;;
STATUS) echo "STATUS" >>"$dir/calls"
     if [ -e "$dir/not-ready" ]; then echo '{"cniVersion":"1.1.0","code":50,"msg":"no addresses left"}'; exit 1; fi ;;
GC) echo "GC $(echo "$conf" | tr -d ' \n' | sed -n 's/.*"cni.dev\/valid-attachments":\(\[[^]]*\]\).*/\1/p')" >>"$dir/calls" ;;
esac
`

func cniRig(t *testing.T) (*CNI, string) {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "logging"), []byte(loggingPlugin), 0o755); err != nil {
		t.Fatal(err)
	}
	return NewCNI([]string{bin}, t.TempDir(), nil), bin
}

func calls(t *testing.T, bin string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bin, "calls"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(bin, "calls"))
	return strings.Fields(strings.ReplaceAll(string(data), "\n", " | "))
}

func network(version, container string) CNINetwork {
	return CNINetwork{Conflist: []byte(`{"cniVersion": "` + version + `", "name": "default-c-r", "plugins": [{"type": "logging"}]}`),
		ContainerID: container, NetNS: "/run/netns/none", IfName: "net1"}
}

// STATUS runs for CNI 1.1 configs only, and says when a plugin cannot add.
func TestCNIStatus(t *testing.T) {
	ctx := context.Background()
	c, bin := cniRig(t)
	if err := c.Status(ctx, network("1.0.0", "s1")); err != nil || len(calls(t, bin)) != 0 {
		t.Errorf("STATUS of a 1.0.0 config: %v; it has none", err)
	}
	if err := c.Status(ctx, network("1.1.0", "s1")); err != nil || !slices.Equal(calls(t, bin), []string{"STATUS", "|"}) {
		t.Errorf("STATUS of a 1.1.0 config: %v", err)
	}
	if err := os.WriteFile(filepath.Join(bin, "not-ready"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Status(ctx, network("1.1.0", "s1")); err == nil || !strings.Contains(err.Error(), "no addresses left") {
		t.Errorf("STATUS of a plugin not ready: %v", err)
	}
}

// CHECK runs with the cached result; configs before 0.4.0 have none.
func TestCNICheck(t *testing.T) {
	ctx := context.Background()
	c, bin := cniRig(t)
	n := network("1.1.0", "s1")
	if _, err := c.Add(ctx, n); err != nil {
		t.Fatal(err)
	}
	calls(t, bin)
	if res, ok, err := c.Cached(ctx, n); err != nil || !ok || res.Current == nil || len(res.Current.IPs) != 1 {
		t.Errorf("cached result: %+v, %v, %v", res, ok, err)
	}
	if _, ok, err := c.Cached(ctx, network("1.1.0", "s9")); err != nil || ok {
		t.Errorf("cached result of a sandbox never added: %v, %v", ok, err)
	}
	if err := c.Check(ctx, n); err != nil || !slices.Equal(calls(t, bin), []string{"CHECK", "s1", "net1", "|"}) {
		t.Errorf("CHECK: %v", err)
	}
	if err := os.WriteFile(filepath.Join(bin, "check-fails"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(ctx, n); err == nil || !strings.Contains(err.Error(), "the interface is gone") || CheckNotSupported(err) {
		t.Errorf("a failing CHECK: %v", err)
	}
	if err := c.Check(ctx, network("0.3.1", "s1")); !CheckNotSupported(err) {
		t.Errorf("CHECK of a 0.3.1 config: %v", err)
	}
}

// The cached attachments are listed, and GC deletes the stale ones of a
// network and tells its plugins which stay.
func TestCNIGC(t *testing.T) {
	ctx := context.Background()
	c, bin := cniRig(t)
	for _, s := range []string{"s1", "s2", "s3"} {
		if _, err := c.Add(ctx, network("1.1.0", s)); err != nil {
			t.Fatal(err)
		}
	}
	calls(t, bin)
	atts, err := c.Attachments()
	if err != nil || len(atts) != 3 {
		t.Fatalf("attachments: %+v, %v", atts, err)
	}
	var ids []string
	for _, a := range atts {
		if a.Network != "default-c-r" || a.IfName != "net1" || a.NetNS != "/run/netns/none" || !json.Valid(a.Conflist) {
			t.Errorf("attachment %+v", a)
		}
		ids = append(ids, a.ContainerID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"s1", "s2", "s3"}) {
		t.Errorf("attachments of %v", ids)
	}
	if err := c.GC(ctx, atts[0].Conflist, []CNIAttachment{{ContainerID: "s2", IfName: "net1"}}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(calls(t, bin), " ")
	for _, want := range []string{"DEL s1 net1", "DEL s3 net1", `GC [{"containerID":"s2","ifname":"net1"}]`} {
		if !strings.Contains(got, want) {
			t.Errorf("calls %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "DEL s2") {
		t.Errorf("a valid attachment was deleted: %q", got)
	}
	if atts, _ := c.Attachments(); len(atts) != 1 || atts[0].ContainerID != "s2" {
		t.Errorf("attachments after GC: %+v", atts)
	}
}

// A result libcni cached cut short (the daemon killed while libcni wrote
// it, after the plugins' ADD) is an ADD not completed, not an error: DEL
// runs, drops the entry, and ADD can run again.
func TestCNIAddedCacheCutShort(t *testing.T) {
	ctx := context.Background()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "logging"), []byte(loggingPlugin), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	c := NewCNI([]string{bin}, cache, nil)
	n := network("1.0.0", "cut")
	entry := filepath.Join(cache, "results", "default-c-r-cut-net1")
	if err := os.MkdirAll(filepath.Dir(entry), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(entry, []byte(`{"kind":"cniCacheV1","containerId":"cut","config":"eyJj`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := c.Added(ctx, n); ok || err != nil {
		t.Fatalf("Added with the cache cut short = %v, %v; want not added, no error", ok, err)
	}
	if err := c.Del(ctx, n); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if got := calls(t, bin); !slices.Equal(got, []string{"DEL", "cut", "net1", "|"}) {
		t.Errorf("calls %v, want one DEL", got)
	}
	if _, err := os.Stat(entry); !os.IsNotExist(err) {
		t.Errorf("the entry cut short is still there after DEL: %v", err)
	}
}
