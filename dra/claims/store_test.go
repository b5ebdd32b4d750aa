package claims

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path, Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openWhole is open, the store writing version 2: the whole checkpoint at
// every change, its pending write in a file of its own.
func openWhole(t *testing.T, path string) *Store {
	t.Helper()
	s := open(t, path)
	s.SetJournal(false)
	return s
}

func netdevClaim(uid, pod, device, ifName string) Claim {
	return Claim{Driver: DriverFastpath, UID: typesUID(uid), Namespace: "default", Name: "c-" + uid, Pod: Pod{UID: typesUID(pod), Name: "p-" + pod},
		Devices: []Device{{Request: "net", Pool: "node-a", Device: device, Kind: "sriov-vf", Mode: "netdev",
			Host: &HostNetdev{Name: "ens1f0v0", MTU: 1500}, Pod: &PodInterface{Name: ifName, Addresses: []string{"10.0.0.2/24"}},
			VF: &VF{PFName: "ens1f0", ID: 3, Set: VFSettings{VLAN: new(100)}, Before: &VFState{MAC: "00:00:00:00:00:00"}}}},
		CDISpec: "/run/cdi/x.json", Steps: []Step{{Name: "files", State: StepDone}, {Name: "vf net", State: StepStarted}}, BootID: "b1"}
}

func cniClaim(uid, pod, device, ifName string) Claim {
	return Claim{Driver: DriverCNI, UID: typesUID(uid), Namespace: "default", Name: "c-" + uid, Pod: Pod{UID: typesUID(pod), Name: "p-" + pod},
		Networks: []Network{{Request: "net", Pool: "node-a", Device: device, IfName: ifName, Conflist: json.RawMessage(`{"cniVersion":"1.0.0"}`)}}, Prepared: true}
}

func TestStoreRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := open(t, path)
	a, b := netdevClaim("a", "pod1", "dev-a", "net1"), cniClaim("b", "pod1", "cni-0", "net2")
	for _, c := range []Claim{a, b} {
		if err := s.Put(c); err != nil {
			t.Fatal(err)
		}
	}
	again := open(t, path)
	if got := again.Claims(); !reflect.DeepEqual(got, s.Claims()) || len(got) != 2 {
		t.Fatalf("reloaded %+v, want %+v", got, s.Claims())
	}
	got, ok := again.Get(a.Key())
	if !ok || !reflect.DeepEqual(got, a) {
		t.Errorf("Get = %+v, %v; want %+v", got, ok, a)
	}
	if pods := again.PodClaims("pod1"); len(pods) != 2 || pods[0].Name != "c-a" || pods[1].Name != "c-b" {
		t.Errorf("PodClaims = %+v", pods)
	}
	if err := again.Delete(a.Key()); err != nil {
		t.Fatal(err)
	}
	if _, ok := open(t, path).Get(a.Key()); ok {
		t.Error("deleted claim still in the file")
	}
}

func TestStoreCopies(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "checkpoint.json"))
	c := netdevClaim("a", "pod1", "dev-a", "net1")
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	c.Devices[0].Pod.Name = "changed"
	got, _ := s.Get(c.Key())
	got.Devices[0].Host.Name = "changed"
	if again, _ := s.Get(c.Key()); again.Devices[0].Pod.Name != "net1" || again.Devices[0].Host.Name != "ens1f0v0" {
		t.Errorf("the store shares memory with its callers: %+v", again.Devices[0])
	}
}

func TestAdmitConflicts(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "checkpoint.json"))
	if err := s.Admit(netdevClaim("a", "pod1", "dev-a", "net1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(cniClaim("b", "pod1", "cni-0", "net2")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		claim Claim
		want  string
	}{
		{"fastpath name taken by fastpath", netdevClaim("c", "pod1", "dev-c", "net1"), `claim default/c-c, request "net": interface name net1 is already given to the pod by claim default/c-a`},
		{"CNI name taken by fastpath", cniClaim("c", "pod1", "cni-1", "net1"), `claim default/c-c, request "net": interface name net1 is already given to the pod by claim default/c-a`},
		{"fastpath name taken by CNI", netdevClaim("c", "pod1", "dev-c", "net2"), `claim default/c-c, request "net": interface name net2 is already given to the pod by claim default/c-b`},
		{"device of another claim", netdevClaim("c", "pod2", "dev-a", "net1"), `claim default/c-c, request "net": device dev-a is already prepared for claim default/c-a`},
		{"CNI device of another claim", cniClaim("c", "pod2", "cni-0", "net1"), `device cni-0 is already prepared for claim default/c-b`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Admit(tc.claim)
			var conflict *ConflictError
			if !errors.As(err, &conflict) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Admit = %v, want a conflict %q", err, tc.want)
			}
			if _, ok := s.Get(tc.claim.Key()); ok {
				t.Error("a refused claim was recorded")
			}
		})
	}
	// Other pods may use the same names; the same device name of the other
	// driver is another device.
	if err := s.Admit(netdevClaim("d", "pod2", "cni-0", "net1")); err != nil {
		t.Errorf("Admit: %v", err)
	}
}

func TestFailedWriteChangesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := open(t, path)
	a := netdevClaim("a", "pod1", "dev-a", "net1")
	if err := s.Put(a); err != nil {
		t.Fatal(err)
	}
	full := errors.New("no space left on device")
	s.WriteFile = func(string, []byte, bool) error { return full }
	s.Append = func(string, []byte, bool, int64) error { return full }
	b := cniClaim("b", "pod1", "cni-0", "net2")
	_, pendingErr := s.AdmitPending(b)
	for name, err := range map[string]error{"Put": s.Put(b), "Admit": s.Admit(b), "Delete": s.Delete(a.Key()), "AdmitPending": pendingErr} {
		if !errors.Is(err, full) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s = %v, want the write error naming %s", name, err, path)
		}
	}
	if got := s.Claims(); len(got) != 1 || got[0].Key() != a.Key() {
		t.Errorf("store changed by failed writes: %+v", got)
	}
	if _, err := os.Stat(PendingPath(path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed pending write left its file: %v", err)
	}
}

func TestLockIsPerClaim(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "checkpoint.json"))
	a, b := Key{DriverFastpath, "a"}, Key{DriverFastpath, "b"}
	unlockA := s.Lock(a)
	done := make(chan struct{})
	go func() {
		s.Lock(b)()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("claim b's lock waited for claim a's")
	}
	second := make(chan struct{})
	go func() {
		s.Lock(a)()
		close(second)
	}()
	select {
	case <-second:
		t.Fatal("claim a's lock was taken twice")
	case <-time.After(50 * time.Millisecond):
	}
	unlockA()
	<-second
	if n := s.locks.held(); n != 0 {
		t.Errorf("%d locks left behind", n)
	}
}

func TestOpenRefuses(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"empty", "", "the file is empty"},
		{"garbage", "\x00garbage", "not a checkpoint"},
		{"truncated", `{"version": 2, "claims": {"fastpath.dev/a": {"driver": "fastpath.dev"`, "not a checkpoint"},
		{"no version", `{"claims": {}}`, "no version"},
		{"newer", `{"version": 4, "claims": {}}`, "is version 4, newer than this fastpathd reads (versions 1 to 3)"},
		{"null claim", `{"version": 2, "claims": {"x": null}}`, `claim "x": no record (null)`},
		{"null v1 claim", `{"version": 1, "claims": {"x": null}}`, `claim "x": no record (null)`},
		{"wrong key", `{"version": 2, "claims": {"fastpath.dev/b": {"driver": "fastpath.dev", "uid": "a", "namespace": "n", "name": "a", "pod": {"uid": "p"}}}}`, "stored under the key of another claim"},
		{"unknown driver", `{"version": 2, "claims": {"x/a": {"driver": "x", "uid": "a", "namespace": "n", "name": "a", "pod": {"uid": "p"}}}}`, `unknown driver "x"`},
		{"bad step", `{"version": 2, "claims": {"fastpath.dev/a": {"driver": "fastpath.dev", "uid": "a", "namespace": "n", "name": "a", "pod": {"uid": "p"}, "steps": [{"name": "vf", "state": "maybe"}]}}}`, `steps[0]`},
		{"wrong type", `{"version": 2, "claims": []}`, "corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "checkpoint.json")
			if err := os.WriteFile(path, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Open(path, Legacy{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Open = %v, want an error naming %s and saying %q", err, path, tc.want)
			}
			if data, _ := os.ReadFile(path); string(data) != tc.data {
				t.Error("the refused file was changed")
			}
		})
	}
}

func npwgRecord(pod string, networks ...string) Claim {
	c := Claim{Driver: DriverNPWG, UID: typesUID(pod), Namespace: "default", Name: "p-" + pod, Pod: Pod{UID: typesUID(pod), Name: "p-" + pod}, Prepared: true}
	for i, n := range networks {
		ifName := "net" + string(rune('1'+i))
		c.Networks = append(c.Networks, Network{Request: n, Device: ifName, IfName: ifName, Conflist: json.RawMessage(`{"cniVersion":"1.0.0","name":"x"}`),
			CapabilityArgs: map[string]any{"ips": []any{"10.1.0.9/24"}}, DefaultRoute: i == 0, Gateways: []string{"10.1.0.1"}})
	}
	return c
}

// TestNPWGRecords: a pod's NPWG record round-trips through the file; many
// pods attach to one network; its interface names are the pod's, against
// its claims'.
func TestNPWGRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := open(t, path)
	if err := s.Admit(cniClaim("b", "pod1", "cni-0", "net2")); err != nil {
		t.Fatal(err)
	}
	a := npwgRecord("pod1", "default/net-a")
	if err := s.Admit(a); err != nil {
		t.Fatal(err)
	}
	if err := s.Admit(npwgRecord("pod2", "default/net-a", "default/net-b")); err != nil {
		t.Errorf("a second pod on the same network: %v", err)
	}
	err := s.Admit(npwgRecord("pod1", "default/net-a", "default/net-b"))
	if want := `claim default/p-pod1, request "default/net-b": interface name net2 is already given to the pod by claim default/c-b`; err == nil || err.Error() != want {
		t.Errorf("Admit = %v, want %q", err, want)
	}
	got, ok := open(t, path).Get(a.Key())
	if !ok || !reflect.DeepEqual(got, a) {
		t.Errorf("reloaded %+v, want %+v", got, a)
	}
}

// AdmitPending admits as Admit does, conflicts refused: the store has the
// record at once, and after wait the checkpoint has it and no pending file
// is left.
func TestAdmitPending(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := open(t, path)
	a := cniClaim("a", "pod1", "cni-0", "net1")
	wait, err := s.AdmitPending(a)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get(a.Key()); !ok {
		t.Error("the store does not have the record before wait")
	}
	if err := wait(); err != nil {
		t.Errorf("wait: %v", err)
	}
	if err := wait(); err != nil {
		t.Errorf("wait again: %v", err)
	}
	if _, err := os.Stat(PendingPath(path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pending file is left after wait: %v", err)
	}
	if got := open(t, path).Claims(); len(got) != 1 || got[0].Key() != a.Key() {
		t.Errorf("the checkpoint holds %+v after wait, want the admitted claim", got)
	}
	var conflict *ConflictError
	if _, err := s.AdmitPending(cniClaim("b", "pod1", "cni-1", "net1")); !errors.As(err, &conflict) {
		t.Errorf("a second claim giving the pod net1 again: %v, want a ConflictError", err)
	}
	// The next write waits for the pending one and keeps it.
	b := cniClaim("b", "pod2", "cni-1", "net1")
	if _, err := s.AdmitPending(b); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(a.Key()); err != nil {
		t.Fatal(err)
	}
	if got := open(t, path).Claims(); len(got) != 1 || got[0].Key() != b.Key() {
		t.Errorf("the checkpoint holds %+v, want only %s", got, b.Key())
	}
}

// PutPending changes a record as Put does: the store has it at once, a
// process that reads the files before wait (a restart after a kill) finds
// it, and after wait so does one after a power loss; the next write waits
// for it.
func TestPutPending(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := open(t, path)
	a := netdevClaim("a", "pod1", "dev-a", "net1")
	if err := s.Put(a); err != nil {
		t.Fatal(err)
	}
	a.Devices[0].Attached = &Attachment{SandboxID: "s1", NetNS: "/run/netns/p1"}
	wait, err := s.PutPending(a)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(a.Key()); got.Devices[0].Attached == nil {
		t.Error("the store does not have the change before wait")
	}
	if err := wait(); err != nil {
		t.Errorf("wait: %v", err)
	}
	if got, _ := open(t, path).Get(a.Key()); got.Devices[0].Attached == nil || *got.Devices[0].Attached != *a.Devices[0].Attached {
		t.Errorf("the files hold %+v after wait", got.Devices[0].Attached)
	}
	// Read before the sync, as a restart after a kill would.
	a.Devices[0].Attached = nil
	if _, err := s.PutPending(a); err != nil {
		t.Fatal(err)
	}
	if got, _ := open(t, path).Get(a.Key()); got.Devices[0].Attached != nil {
		t.Errorf("a restart finds %+v, want the change", got.Devices[0].Attached)
	}
	if err := s.Delete(a.Key()); err != nil {
		t.Fatal(err)
	}
	if got := open(t, path).Claims(); len(got) != 0 {
		t.Errorf("the checkpoint holds %+v after the next write, want none", got)
	}
}

// A process killed after AdmitPending's write and before its commit: the
// next Open finds the record, and the pending file is the checkpoint. One
// killed while writing it, or a power loss before its sync, leaves a file
// that does not parse: dropped, the checkpoint as it was. One of a newer
// version is refused as the checkpoint would be.
func TestOpenAdoptsPending(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	s := openWhole(t, path)
	a, b := netdevClaim("a", "pod1", "dev-a", "net1"), cniClaim("b", "pod1", "cni-0", "net2")
	if err := s.Put(a); err != nil {
		t.Fatal(err)
	}
	// Killed: the commit never runs (the store is abandoned, held).
	if err := writePending(s, b); err != nil {
		t.Fatal(err)
	}
	pending, err := os.ReadFile(PendingPath(path))
	if err != nil {
		t.Fatal(err)
	}
	restarted := open(t, path)
	if got := restarted.Claims(); len(got) != 2 {
		t.Errorf("after the restart: %+v, want both claims", got)
	}
	if _, err := os.Stat(PendingPath(path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pending file is left after Open: %v", err)
	}
	if got := open(t, path).Claims(); len(got) != 2 {
		t.Errorf("the checkpoint after the restart holds %+v, want both claims", got)
	}

	// Cut, as by a kill mid-write or a power loss: dropped.
	if err := restarted.Delete(b.Key()); err != nil {
		t.Fatal(err)
	}
	for _, torn := range [][]byte{pending[:len(pending)/2], nil, make([]byte, len(pending))} {
		if err := os.WriteFile(PendingPath(path), torn, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := open(t, path).Claims(); len(got) != 1 || got[0].Key() != a.Key() {
			t.Errorf("with a pending file of %d bytes cut from %d: %+v, want the checkpoint as it was", len(torn), len(pending), got)
		}
		if _, err := os.Stat(PendingPath(path)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the cut pending file is left: %v", err)
		}
	}

	if err := os.WriteFile(PendingPath(path), []byte(`{"version":99,"claims":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Legacy{}); err == nil || !strings.Contains(err.Error(), PendingPath(path)) || !strings.Contains(err.Error(), "newer") {
		t.Errorf("a pending file of a newer version: %v, want an error naming it", err)
	}
	if _, err := os.Stat(PendingPath(path)); err != nil {
		t.Errorf("a pending file of a newer version is not left as it is: %v", err)
	}
}

// writePending is AdmitPending's write without its durable half: the
// store as a process killed before the sync leaves it (held, abandoned).
func writePending(s *Store, c Claim) error {
	_, _, err := s.write(c.Key(), s.admit(c, nil), false)
	return err
}

// TestFault: a write that fails (a full disk) is the store's fault until
// one succeeds; the claim it would have changed is as it was.
func TestFault(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "checkpoint.json"), Legacy{})
	if err != nil {
		t.Fatal(err)
	}
	s.SetJournal(false)
	full := errors.New("no space left on device")
	write := s.WriteFile
	s.WriteFile = func(string, []byte, bool) error { return full }
	c := Claim{Driver: "fastpath.dev", Namespace: "ns", Name: "c", UID: "u"}
	if err := s.Put(c); !errors.Is(err, full) {
		t.Fatalf("put: %v", err)
	}
	if err := s.Fault(); !errors.Is(err, full) {
		t.Errorf("fault %v, want the write's", err)
	}
	if _, ok := s.Get(c.Key()); ok {
		t.Error("the claim the failed write would have recorded is the store's")
	}
	s.WriteFile = write
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	if err := s.Fault(); err != nil {
		t.Errorf("fault %v after a write", err)
	}
}
