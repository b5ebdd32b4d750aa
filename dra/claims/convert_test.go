package claims

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// v1Store is a store opened from the previous release's files.
func v1Store(t *testing.T) (s *Store, path string, legacy Legacy) {
	t.Helper()
	dir := t.TempDir()
	path, legacy = filepath.Join(dir, "checkpoint.json"), Legacy{CNI: filepath.Join(dir, "cni", "cni-checkpoint.json")}
	copyFile(t, "testdata/v1/checkpoint.json", path)
	copyFile(t, "testdata/v1/cni/cni-checkpoint.json", legacy.CNI)
	s, err := Open(path, legacy)
	if err != nil {
		t.Fatal(err)
	}
	return s, path, legacy
}

// Down to version 1 and up again: the same claims.
func TestConvertRoundTrip(t *testing.T) {
	s, path, legacy := v1Store(t)
	want := s.Claims()
	if err := Convert(path, legacy, 1); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{path, legacy.CNI} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if v := fileVersion(data); v != 1 {
			t.Errorf("%s: version %d, want 1", f, v)
		}
	}
	if err := Convert(path, legacy, Version); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(legacy.CNI); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the CNI driver's file is still there after converting up: %v", err)
	}
	back, err := Open(path, legacy)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Claims(); !reflect.DeepEqual(got, want) {
		t.Errorf("after down and up:\n%+v\nwant\n%+v", got, want)
	}
}

// A device as published is left out of version 1, whose release published
// what discovery saw: converted down and up, the record is the same but
// for it.
func TestConvertPublishedToV1(t *testing.T) {
	s, path, legacy := v1Store(t)
	key := Key{DriverFastpath, "uid-net"}
	c, _ := s.Get(key)
	want := s.Claims()
	c.Devices[0].Published = &PublishedDevice{Attributes: map[string]Attribute{"ifName": {String: new("ens1f0v0")}, "mtu": {Int: new(int64(1500))}}}
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	if err := Convert(path, legacy, 1); err != nil {
		t.Fatal(err)
	}
	if err := Convert(path, legacy, Version); err != nil {
		t.Fatal(err)
	}
	back, err := Open(path, legacy)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Claims(); !reflect.DeepEqual(got, want) {
		t.Errorf("after down and up:\n%+v\nwant\n%+v", got, want)
	}
}

// A record version 1 cannot hold is named, and nothing is written.
func TestConvertRefusesWhatV1CannotHold(t *testing.T) {
	s, path, legacy := v1Store(t)
	c, _ := s.Get(Key{DriverFastpath, "uid-net"})
	c.Devices[0].ResourceName = "intel.com/sriov"
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	npwg := Claim{Driver: DriverNPWG, UID: "pod-1", Namespace: "default", Name: "pod-a", Pod: Pod{UID: "pod-1", Name: "pod-a"}, Prepared: true}
	if err := s.Put(npwg); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	err = Convert(path, legacy, 1)
	for _, want := range []string{path, "nothing was written", c.String(), "uid-net", "version 1 cannot", "default/pod-a", "driver " + DriverNPWG} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Convert = %v, want an error containing %q", err, want)
		}
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Error("the checkpoint changed")
	}
	if _, err := os.Stat(legacy.CNI); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a CNI driver's file was written: %v", err)
	}
	if err := Convert(path, legacy, 4); err == nil || !strings.Contains(err.Error(), "version 4") {
		t.Errorf("Convert to 4 = %v, want an error naming the version", err)
	}
}

// A checkpoint of a newer version is refused, naming the file, both
// versions and the command that converts it; it is left as it is.
func TestNewerVersionRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint.json")
	data := []byte(`{"version": 4, "claims": {}, "journal": "somewhere"}`)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, Legacy{})
	var newer *NewerError
	if !errors.As(err, &newer) || newer.Version != 4 || newer.Path != path {
		t.Fatalf("Open = %v, want a NewerError of version 4 for %s", err, path)
	}
	for _, want := range []string{path, "version 4", "versions 1 to 3", "fastpathd checkpoint migrate --to 3 --state-dir " + dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: want %q in it", err, want)
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
		t.Errorf("the checkpoint changed: %s", after)
	}
}

// Fields a newer build of the same version wrote are kept when this build
// rewrites its records: at the top, in a record, in its devices.
func TestKeepsUnknownFields(t *testing.T) {
	_, path, _ := v1Store(t)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	file["journal"] = "checkpoint.journal"
	// Rewritten here, the records lose the checksums of their bytes as
	// the store wrote them: as a build without checksums writes them.
	delete(file, "checksums")
	net := file["claims"].(map[string]any)["fastpath.dev/uid-net"].(map[string]any)
	net["priority"] = 7.0
	net["devices"].([]any)[0].(map[string]any)["numaNode"] = 1.0
	net["devices"].([]any)[0].(map[string]any)["vf"].(map[string]any)["trustBefore"] = "off"
	if data, err = json.Marshal(file); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := s.Get(Key{DriverFastpath, "uid-net"})
	c.Pod.Name = "renamed"
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(Key{DriverFastpath, "uid-xsk"}); err != nil {
		t.Fatal(err)
	}
	// The journal's entries keep them as the checkpoint does.
	cls, _, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := cls[Key{DriverFastpath, "uid-net"}]; got == nil || got.unknown == nil || got.Pod.Name != "renamed" {
		t.Errorf("read back through the journal: %+v", got)
	}
	if err := s.Fold(); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(path)
	file = nil
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	net = file["claims"].(map[string]any)["fastpath.dev/uid-net"].(map[string]any)
	dev := net["devices"].([]any)[0].(map[string]any)
	for what, got := range map[string]any{
		"top-level journal": file["journal"], "record's priority": net["priority"], "device's numaNode": dev["numaNode"],
		"VF's trustBefore": dev["vf"].(map[string]any)["trustBefore"],
	} {
		if got == nil {
			t.Errorf("%s dropped: %s", what, data)
		}
	}
	if net["pod"].(map[string]any)["name"] != "renamed" {
		t.Errorf("the change was not written: %v", net["pod"])
	}
	if _, ok := file["claims"].(map[string]any)["fastpath.dev/uid-xsk"]; ok {
		t.Error("the deleted record is still there")
	}
	// A record without unknown fields is written as this build writes it.
	plain, _ := s.Get(Key{DriverFastpath, "uid-dpdk"})
	if plain.unknown != nil {
		t.Errorf("a record without unknown fields keeps its bytes: %s", plain.unknown)
	}
}

// View holds what Claims holds, in the same order, without copies.
func TestView(t *testing.T) {
	s, _, _ := v1Store(t)
	all, view := s.Claims(), s.View()
	if len(view) != len(all) {
		t.Fatalf("View has %d claims, Claims %d", len(view), len(all))
	}
	for i, c := range view {
		got := clone(c)
		if !reflect.DeepEqual(got, all[i]) {
			t.Errorf("View[%d] = %+v, want %+v", i, got, all[i])
		}
	}
}

// Down to version 1 and up again, each record keeps the boot it was
// prepared in: the next start does not prepare every claim again.
func TestConvertKeepsBootID(t *testing.T) {
	dir := t.TempDir()
	path, legacy := filepath.Join(dir, "checkpoint.json"), Legacy{CNI: filepath.Join(dir, "cni", "cni-checkpoint.json")}
	s := open(t, path)
	a := netdevClaim("a", "pod1", "dev-a", "net1")
	a.Prepared, a.Steps, a.Devices[0].VF.Before = true, nil, nil
	b := cniClaim("b", "pod2", "cni-0", "net1")
	b.BootID = "b2"
	for _, c := range []Claim{a, b} {
		if err := s.Put(c); err != nil {
			t.Fatal(err)
		}
	}
	for _, to := range []int{1, Version} {
		if err := Convert(path, legacy, to); err != nil {
			t.Fatalf("to version %d: %v", to, err)
		}
	}
	back := open(t, path)
	for _, want := range []Claim{a, b} {
		if got, ok := back.Get(want.Key()); !ok || got.BootID != want.BootID {
			t.Errorf("claim %s after version 1 and back: boot ID %q (found %v), want %q", &want, got.BootID, ok, want.BootID)
		}
	}
}
