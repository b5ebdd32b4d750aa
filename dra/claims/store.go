package claims

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dataplane/hostdir"
)

// Version is the checkpoint format this build writes. It migrates older
// ones and refuses newer ones rather than misread them.
const Version = 2

// checkpoint is the file: every claim by its key.
type checkpoint struct {
	Version int               `json:"version"`
	Claims  map[string]*Claim `json:"claims"`
}

// Store holds every prepared claim. Its methods are safe for concurrent
// use. Writers of one claim hold its lock (Lock) across their read, side
// effects and Put, so that they see each other's records.
type Store struct {
	path string

	// fileMu orders writes of the file; mu guards claims. A write holds
	// fileMu across the file write and mu only to change and copy the
	// map, so readers never wait for the disk.
	fileMu sync.Mutex
	mu     sync.RWMutex
	claims map[Key]*Claim

	locks Locks[Key]

	// WriteFile writes the checkpoint (WriteFileAtomic), or with sync
	// false its pending file (WriteFileUnsynced, see AdmitPending), unless
	// a test of failed writes (a full disk) sets it before the store is
	// used.
	WriteFile func(path string, data []byte, sync bool) error

	// shared: another daemon may write the file (see Share); seen is the
	// version of the file this store has. Both under mu.
	shared bool
	seen   stamp

	// extra holds the top-level fields of the checkpoint this build does
	// not know (a newer build wrote them), to write them back; nil for
	// none. Under mu.
	extra json.RawMessage
}

// Open loads the checkpoint at path, migrating the files of the previous
// release (see Migrate) first, and the pending write a killed process left
// before it (AdmitPending). A missing checkpoint is an empty store. A
// checkpoint that cannot be read, is corrupt or is of a newer version is an
// error naming the file and what is wrong; the file is left as it is. The
// checkpoint's directory is made, or made private to its owner
// (hostdir.Make).
func Open(path string, legacy Legacy) (*Store, error) {
	if err := hostdir.Make(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("checkpoint directory: %w", err)
	}
	if err := adoptPending(path); err != nil {
		return nil, err
	}
	if err := removeTemps(path); err != nil {
		return nil, err
	}
	data, err := readFile(path)
	exists := true
	switch {
	case errors.Is(err, os.ErrNotExist):
		exists = false
	case err != nil:
		return nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	s := &Store{path: path, WriteFile: func(path string, data []byte, sync bool) error {
		if !sync {
			return WriteFileUnsynced(path, data, 0o600)
		}
		return WriteFileAtomic(path, data, 0o600)
	}}
	if err := s.load(data, exists, legacy); err != nil {
		return nil, err
	}
	return s, nil
}

// load sets the store's claims from data, the content of its checkpoint
// file (exists false: there is none), and migrates the files of the
// previous release, writing through s.WriteFile.
func (s *Store) load(data []byte, exists bool, legacy Legacy) error {
	s.claims = map[Key]*Claim{}
	if exists {
		claims, version, extra, err := parse(data)
		if _, newer := errors.AsType[*NewerError](err); newer {
			return withPath(err, s.path, s.path)
		}
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", s.path, err)
		}
		if version < Version {
			if claims, err = migrateFastpath(data); err != nil {
				return fmt.Errorf("checkpoint %s (version %d): %w", s.path, version, err)
			}
		}
		s.claims, s.extra = claims, extra
	}
	return s.migrate(legacy, data)
}

// Parse decodes a checkpoint of this build's version, checking every
// record, and says which version it is. An older version is not decoded
// (nil claims, its version, no error).
func Parse(data []byte) (map[Key]*Claim, int, error) {
	claims, version, _, err := parse(data)
	return claims, version, err
}

// parse is Parse, and the top-level fields of the checkpoint this build
// does not know (extra; nil for none).
func parse(data []byte) (_ map[Key]*Claim, version int, extra json.RawMessage, _ error) {
	var head struct {
		Version *int `json:"version"`
	}
	if len(data) == 0 {
		return nil, 0, nil, errors.New("the file is empty")
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, 0, nil, fmt.Errorf("not a checkpoint: %w", err)
	}
	switch {
	case head.Version == nil:
		return nil, 0, nil, errors.New("not a checkpoint: no version")
	case *head.Version > Version:
		return nil, *head.Version, nil, &NewerError{Version: *head.Version}
	case *head.Version < 1:
		return nil, *head.Version, nil, fmt.Errorf("version %d is not a checkpoint version", *head.Version)
	case *head.Version < Version:
		return nil, *head.Version, nil, nil
	}
	var cp checkpoint
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if dec.Decode(&cp) != nil {
		cp = checkpoint{}
		if err := json.Unmarshal(data, &cp); err != nil {
			return nil, Version, nil, fmt.Errorf("corrupt: %w", err)
		}
		var err error
		if extra, err = topLevelUnknown(data); err != nil {
			return nil, Version, nil, fmt.Errorf("corrupt: %w", err)
		}
	}
	claims := make(map[Key]*Claim, len(cp.Claims))
	for k, c := range cp.Claims {
		if err := c.check(k); err != nil {
			return nil, Version, nil, fmt.Errorf("claim %q: %w", k, err)
		}
		var err error
		if c.encoded, err = encode(c); err != nil {
			return nil, Version, nil, fmt.Errorf("claim %q: %w", k, err)
		}
		claims[c.Key()] = c
	}
	return claims, Version, extra, nil
}

// check says what is wrong with a record read from a file stored under key.
func (c *Claim) check(key string) error {
	switch {
	case c == nil:
		return errors.New("no record (null)")
	case !slices.Contains([]string{DriverFastpath, DriverCNI, DriverNPWG, DriverIPAMClaim}, c.Driver):
		return fmt.Errorf("unknown driver %q", c.Driver)
	case c.UID == "" || c.Namespace == "" || c.Name == "":
		return errors.New("uid, namespace and name are required")
	case key != c.Key().String():
		return fmt.Errorf("stored under the key of another claim (%s)", c.Key())
	case c.Pod.UID == "":
		return errors.New("no pod")
	}
	for i, d := range c.Devices {
		if d.Request == "" || d.Device == "" || d.Pool == "" {
			return fmt.Errorf("devices[%d]: request, pool and device are required", i)
		}
		if d.VF != nil && d.VF.PFName == "" {
			return fmt.Errorf("devices[%d].vf: no PF", i)
		}
		if d.XDP != nil && d.XDP.PinDir == "" {
			return fmt.Errorf("devices[%d].xdp: no pin directory", i)
		}
		if d.Memif != nil && d.Memif.Dir == "" {
			return fmt.Errorf("devices[%d].memif: no directory", i)
		}
		if d.Shared != nil && (d.Shared.Parent == "" || d.Shared.Kind == "") {
			return fmt.Errorf("devices[%d].shared: parent and kind are required", i)
		}
		if d.IPAM != nil && (d.IPAM.Pool == "" || d.IPAM.Address == "") {
			return fmt.Errorf("devices[%d].ipam: pool and address are required", i)
		}
	}
	for i, n := range c.Networks {
		if n.Request == "" || n.Device == "" || n.IfName == "" || len(n.Conflist) == 0 {
			return fmt.Errorf("networks[%d]: request, device, ifName and conflist are required", i)
		}
	}
	for i, s := range c.Steps {
		if s.Name == "" || (s.State != StepStarted && s.State != StepDone) {
			return fmt.Errorf("steps[%d]: %q in state %q", i, s.Name, s.State)
		}
	}
	return nil
}

// BootID is this boot of the node (/proc/sys/kernel/random/boot_id): the
// effects of steps done in another boot are gone.
func BootID() (string, error) {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("the node's boot ID: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// Path is the checkpoint file.
func (s *Store) Path() string { return s.path }

// Lock takes the claim's lock and returns its release. Writers of one
// claim hold it across their whole change.
func (s *Store) Lock(k Key) (unlock func()) { return s.locks.Lock(k) }

// Get returns a copy of the claim's record.
func (s *Store) Get(k Key) (Claim, bool) {
	s.current()
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.claims[k]
	if !ok {
		return Claim{}, false
	}
	return clone(c), true
}

// Put records the claim, in memory and in the file. If the file cannot be
// written, the store is left as it was and the error says why.
func (s *Store) Put(c Claim) error {
	return s.change(func(claims map[Key]*Claim) error {
		cp, err := stored(&c)
		if err != nil {
			return err
		}
		claims[c.Key()] = cp
		return nil
	})
}

// Delete forgets the claim, in memory and in the file.
func (s *Store) Delete(k Key) error {
	return s.change(func(claims map[Key]*Claim) error {
		delete(claims, k)
		return nil
	})
}

// Admit records a new claim after checking it against every other claim,
// atomically: a device already held by another claim (unless both share
// it), or an interface name another claim gives the same pod, is refused
// with an error naming that claim (a *ConflictError).
func (s *Store) Admit(c Claim) error {
	return s.AdmitWith(c, nil)
}

// AdmitWith admits c as Admit does, after assign completed it in view of
// every other claim (read-only), in the same write: what assign gives the
// claim (an address of a pool) is recorded with it or not at all, and no
// other claim is admitted in between. An error of assign admits nothing.
func (s *Store) AdmitWith(c Claim, assign func(c *Claim, others []*Claim) error) error {
	return s.change(admit(c, assign))
}

// AdmitPending admits c as Admit does, and leaves the durable part of the
// write to run beside the caller, who calls wait before counting on the
// record outliving a power loss.
//
// Before AdmitPending returns, the new checkpoint is in its pending file
// (PendingPath), written but not synced: a process killed from then on
// finds the record at its restart, where Open adopts the file. The file's
// sync, its rename over the checkpoint and the directory's sync then run
// in the background, and the store writes nothing else until they are
// done. A machine that loses power before then finds the checkpoint with
// or without the record, never a broken one: a pending file that does not
// parse is dropped, and the checkpoint is only ever replaced by a synced
// file.
func (s *Store) AdmitPending(c Claim) (wait func() error, _ error) {
	return s.pending(admit(c, nil))
}

// pending applies f, writes the result to the pending file and commits it
// in the background (AdmitPending).
func (s *Store) pending(f func(map[Key]*Claim) error) (wait func() error, _ error) {
	release, err := s.writePending(f)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		defer release()
		done <- commitPending(s.path)
	}()
	return sync.OnceValue(func() error { return <-done }), nil
}

// writePending is the first half of AdmitPending: f applied to a copy of
// the claims, the result written to the pending file and made the
// store's. The store is held (fileMu, and a shared store's file lock)
// until release, which the caller runs once the pending file is committed.
func (s *Store) writePending(f func(map[Key]*Claim) error) (release func(), _ error) {
	s.fileMu.Lock()
	unlock, err := s.lockShared()
	if err != nil {
		s.fileMu.Unlock()
		return nil, err
	}
	release = func() {
		st, _ := stampOf(s.path)
		s.mu.Lock()
		s.seen = st
		s.mu.Unlock()
		unlock()
		s.fileMu.Unlock()
	}
	next := s.copyClaims()
	if err := f(next); err != nil {
		release()
		return nil, err
	}
	data, err := s.marshal(next)
	if err == nil {
		err = s.WriteFile(PendingPath(s.path), data, false)
	}
	if err != nil {
		_ = os.Remove(PendingPath(s.path))
		release()
		return nil, fmt.Errorf("write checkpoint %s: %w", PendingPath(s.path), err)
	}
	s.mu.Lock()
	s.claims = next
	s.mu.Unlock()
	return release, nil
}

// PendingPath is the pending file of the checkpoint at path: the next
// checkpoint, written but not yet synced and renamed over it
// (AdmitPending).
func PendingPath(path string) string { return path + ".pending" }

// commitPending makes the pending file of the checkpoint at path the
// checkpoint: synced, renamed over it, the directory synced. It is renamed
// even if its sync fails (an I/O error): a process killed later finds the
// record, which a power loss may lose. If it cannot be renamed it is
// removed, so that no later Open adopts an old state: the store's next
// write writes the whole checkpoint. So is anything but a regular file of
// its own (ErrNotRegular), which is never renamed over the checkpoint.
func commitPending(path string) error {
	pending := PendingPath(path)
	var syncErr error
	if f, err := openFile(pending, os.O_RDONLY|safeFlags, 0); errors.Is(err, ErrNotRegular) {
		_ = os.Remove(pending)
		return err
	} else if err != nil {
		syncErr = err
	} else {
		if err := f.Sync(); err != nil {
			syncErr = fmt.Errorf("sync %s: %w", pending, err)
		}
		f.Close()
	}
	if err := os.Rename(pending, path); err != nil {
		_ = os.Remove(pending)
		return errors.Join(syncErr, fmt.Errorf("rename %s: %w", pending, err))
	}
	return errors.Join(syncErr, SyncDir(filepath.Dir(path)))
}

// removeTemps removes the temporary files of the checkpoint's writes
// (ReplaceFile) that a process killed before its rename left beside it.
// The file lock is held: a live daemon sharing the store writes its
// temporary files under it.
func removeTemps(path string) error {
	dir, prefix := filepath.Dir(path), "."+filepath.Base(path)+"."
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("checkpoint directory: %w", err)
	}
	var stale []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) && e.Type().IsRegular() {
			stale = append(stale, filepath.Join(dir, e.Name()))
		}
	}
	if len(stale) == 0 {
		return nil
	}
	unlock, err := FileLock(path + ".lock").Lock(context.Background())
	if err != nil {
		return err
	}
	defer unlock()
	for _, f := range stale {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s, left by a write that was killed: %w", f, err)
		}
	}
	return nil
}

// adoptPending completes the pending write (AdmitPending) of a process
// killed before it was: a pending file that parses is committed, one that
// does not (its writer was killed while writing it, before anything was
// done on it, or the machine lost power before it was synced) is removed,
// as is anything but a regular file of its own (ErrNotRegular: a link
// planted there, which is not followed). A shared store's file lock is
// held while it does: a live daemon's pending write is left to it.
func adoptPending(path string) error {
	pending := PendingPath(path)
	if _, err := os.Lstat(pending); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	unlock, err := FileLock(path + ".lock").Lock(context.Background())
	if err != nil {
		return err
	}
	defer unlock()
	return adoptPendingLocked(path)
}

// adoptPendingLocked is adoptPending, its caller holding the file lock.
func adoptPendingLocked(path string) error {
	pending := PendingPath(path)
	data, err := readFile(pending)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil // its writer committed it
	case errors.Is(err, ErrNotRegular):
		if err := os.Remove(pending); err != nil {
			return fmt.Errorf("remove %s, not a file the store wrote: %w", pending, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read %s: %w", pending, err)
	}
	if _, version, err := Parse(data); err != nil {
		if version > Version {
			return withPath(err, path, pending)
		}
		if err := os.Remove(pending); err != nil {
			return fmt.Errorf("remove the unfinished checkpoint %s: %w", pending, err)
		}
		return nil
	}
	if err := commitPending(path); err != nil {
		return fmt.Errorf("checkpoint %s: %w", pending, err)
	}
	return nil
}

// admit is the change that admits c (AdmitWith).
func admit(c Claim, assign func(c *Claim, others []*Claim) error) func(map[Key]*Claim) error {
	return func(claims map[Key]*Claim) error {
		if err := conflicts(claims, &c); err != nil {
			return err
		}
		if assign != nil {
			var others []*Claim
			for _, o := range claims {
				if o.Key() != c.Key() {
					others = append(others, o)
				}
			}
			sortedClaims(others)
			if err := assign(&c, others); err != nil {
				return err
			}
		}
		cp, err := stored(&c)
		if err != nil {
			return err
		}
		claims[c.Key()] = cp
		return nil
	}
}

// ConflictError is a claim that cannot be prepared beside another.
type ConflictError struct {
	Claim, Other string // namespace/name
	// Request of Claim; Device or Interface is what both want.
	Request, Device, Interface string
}

func (e *ConflictError) Error() string {
	if e.Interface != "" {
		return fmt.Sprintf("claim %s, request %q: interface name %s is already given to the pod by claim %s", e.Claim, e.Request, e.Interface, e.Other)
	}
	return fmt.Sprintf("claim %s, request %q: device %s is already prepared for claim %s", e.Claim, e.Request, e.Device, e.Other)
}

// conflicts is the conflict of c with the first other claim (in sortedClaims
// order) it conflicts with, nil for none.
func conflicts(claims map[Key]*Claim, c *Claim) error {
	var first *Claim
	var firstErr error
	for _, o := range claims {
		if first != nil && claimOrder(first, o) < 0 {
			continue // a conflict with o would not be the first
		}
		if err := conflictWith(o, c); err != nil {
			first, firstErr = o, err
		}
	}
	return firstErr
}

// conflictWith is the conflict of c with o, nil for none.
func conflictWith(o, c *Claim) error {
	if o.Key() == c.Key() {
		return nil
	}
	for _, d := range c.Devices {
		for _, od := range o.Devices {
			if o.Driver == c.Driver && od.Pool == d.Pool && od.Device == d.Device && (d.Shared == nil || od.Shared == nil) {
				return &ConflictError{Claim: c.String(), Other: o.String(), Request: d.Request, Device: d.Device}
			}
		}
	}
	for _, n := range c.Networks {
		for _, on := range o.Networks {
			// An NPWG record's networks are no devices: many pods
			// attach to one network.
			if o.Driver == c.Driver && c.Driver != DriverNPWG && on.Pool == n.Pool && on.Device == n.Device && (n.ShareID == "" || on.ShareID == "") {
				return &ConflictError{Claim: c.String(), Other: o.String(), Request: n.Request, Device: n.Device}
			}
		}
	}
	if o.Pod.UID != c.Pod.UID {
		return nil
	}
	taken := o.InterfaceNames()
	for _, d := range c.Devices {
		if d.Pod != nil && slices.Contains(taken, d.Pod.Name) {
			return &ConflictError{Claim: c.String(), Other: o.String(), Request: d.Request, Interface: d.Pod.Name}
		}
	}
	for _, n := range c.Networks {
		if slices.Contains(taken, n.IfName) {
			return &ConflictError{Claim: c.String(), Other: o.String(), Request: n.Request, Interface: n.IfName}
		}
	}
	return nil
}

// change applies f to a copy of the claims, writes the result and makes it
// the store's: the store changes only when the file did.
func (s *Store) change(f func(map[Key]*Claim) error) error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	unlock, err := s.lockShared()
	if err != nil {
		return err
	}
	defer unlock()
	next := s.copyClaims()
	if err := f(next); err != nil {
		return err
	}
	if err := s.save(next); err != nil {
		return err
	}
	st, _ := stampOf(s.path)
	s.mu.Lock()
	s.claims, s.seen = next, st
	s.mu.Unlock()
	return nil
}

// lockShared takes a shared store's file lock and reads the file again if
// another daemon wrote it; a store of its own takes nothing. The caller
// holds fileMu.
func (s *Store) lockShared() (unlock func(), _ error) {
	s.mu.RLock()
	shared := s.shared
	s.mu.RUnlock()
	if !shared {
		return func() {}, nil
	}
	unlock, err := s.lockFile().Lock(context.Background())
	if err != nil {
		return nil, err
	}
	if err := s.refresh(); err != nil {
		unlock()
		return nil, err
	}
	return unlock, nil
}

// copyClaims is a shallow copy of the claims, for a change to apply to.
func (s *Store) copyClaims() map[Key]*Claim {
	s.mu.RLock()
	defer s.mu.RUnlock()
	next := make(map[Key]*Claim, len(s.claims)+1)
	for k, c := range s.claims {
		next[k] = c
	}
	return next
}

// save writes claims to the checkpoint.
func (s *Store) save(claims map[Key]*Claim) error {
	data, err := s.marshal(claims)
	if err != nil {
		return err
	}
	if err := s.WriteFile(s.path, data, true); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", s.path, err)
	}
	return nil
}

// marshal encodes the checkpoint of claims, with the top-level fields this
// build does not know of the checkpoint it read.
func (s *Store) marshal(claims map[Key]*Claim) ([]byte, error) {
	data, err := marshalCheckpoint(claims)
	s.mu.RLock()
	extra := s.extra
	s.mu.RUnlock()
	if err != nil || extra == nil {
		return data, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(extra, &fields); err != nil {
		return nil, err
	}
	// data ends with the object's closing brace.
	buf := bytes.NewBuffer(data[:len(data)-1])
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		buf.WriteByte(',')
		if err := writeJSONString(buf, k); err != nil {
			return nil, err
		}
		buf.WriteByte(':')
		buf.Write(fields[k])
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// topLevelUnknown is the fields of a checkpoint other than its version
// and claims, nil for none.
func topLevelUnknown(data []byte) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, err
	}
	for k := range fields {
		// encoding/json matches names regardless of case.
		if l := strings.ToLower(k); l == "version" || l == "claims" {
			delete(fields, k)
		}
	}
	if len(fields) == 0 {
		return nil, nil
	}
	return json.Marshal(fields)
}

// marshalCheckpoint is the checkpoint of claims, as json.Marshal of a
// checkpoint writes it (claims in key order), from the records' encodings.
func marshalCheckpoint(claims map[Key]*Claim) ([]byte, error) {
	keys := make([]string, 0, len(claims))
	byKey := make(map[string]*Claim, len(claims))
	size := 64
	for k, c := range claims {
		s := k.String()
		keys = append(keys, s)
		byKey[s] = c
		size += len(s) + len(c.encoded) + 4
	}
	slices.Sort(keys)
	buf := bytes.NewBuffer(make([]byte, 0, size))
	fmt.Fprintf(buf, `{"version":%d,"claims":{`, Version)
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := writeJSONString(buf, k); err != nil {
			return nil, err
		}
		buf.WriteByte(':')
		c := byKey[k]
		data := c.encoded
		if data == nil { // a record the store did not make (tests)
			var err error
			if data, err = encode(c); err != nil {
				return nil, fmt.Errorf("claim %s: %w", k, err)
			}
		}
		buf.Write(data)
	}
	buf.WriteString("}}")
	return buf.Bytes(), nil
}

// writeJSONString writes s as a JSON string: as it is, quoted, when it
// needs no escape (a key: a driver's name and a UID), else as json.Marshal
// writes it.
func writeJSONString(buf *bytes.Buffer, s string) error {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	if plain {
		buf.WriteByte('"')
		buf.WriteString(s)
		buf.WriteByte('"')
		return nil
	}
	data, err := json.Marshal(s)
	buf.Write(data)
	return err
}

// Claims lists every claim, in namespace, name and driver order.
func (s *Store) Claims() []Claim {
	s.current()
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []Claim
	for _, c := range sortedClaims(slices.Collect(maps.Values(s.claims))) {
		out = append(out, clone(c))
	}
	return out
}

// View lists every claim as the store holds it, in namespace, name and
// driver order, for reading only: without the copy Claims makes, so that
// the periodic readers (metrics, health, checks) cost no more than a
// pointer per claim. Nothing may change a record View returns.
func (s *Store) View() []*Claim {
	s.current()
	s.mu.RLock()
	out := slices.Collect(maps.Values(s.claims))
	s.mu.RUnlock()
	return sortedClaims(out)
}

// PodClaims lists the claims of the pod with this UID, in namespace, name
// and driver order.
func (s *Store) PodClaims(pod types.UID) []Claim {
	s.current()
	s.mu.RLock()
	defer s.mu.RUnlock()
	var mine []*Claim
	for _, c := range s.claims {
		if c.Pod.UID == pod {
			mine = append(mine, c)
		}
	}
	var out []Claim
	for _, c := range sortedClaims(mine) {
		out = append(out, clone(c))
	}
	return out
}

// Pods lists the UIDs of the pods with claims, sorted.
func (s *Store) Pods() []types.UID {
	s.current()
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []types.UID
	for _, c := range s.claims {
		if !slices.Contains(out, c.Pod.UID) {
			out = append(out, c.Pod.UID)
		}
	}
	slices.Sort(out)
	return out
}

// sortedClaims sorts claims in namespace, name and driver order.
func sortedClaims(out []*Claim) []*Claim {
	slices.SortFunc(out, claimOrder)
	return out
}

// claimOrder orders claims by namespace, name and driver.
func claimOrder(a, b *Claim) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), strings.Compare(a.Driver, b.Driver))
}

// clone deep-copies a record: callers change their copy and Put it.
func clone(c *Claim) Claim {
	data := c.encoded
	if data == nil {
		var err error
		if data, err = json.Marshal(c); err != nil {
			panic(fmt.Sprintf("claims: a record does not marshal: %v", err))
		}
	}
	// Decoded as a plain struct: the unknown fields are c's own, below.
	type plain Claim
	var out plain
	if err := json.Unmarshal(data, &out); err != nil {
		panic(fmt.Sprintf("claims: a record does not unmarshal: %v", err))
	}
	out.unknown = c.unknown
	out.encoded = nil
	return Claim(out)
}

// stored is the store's copy of c, with its encoding.
func stored(c *Claim) (*Claim, error) {
	data, err := encode(c)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", c, err)
	}
	type plain Claim
	var out plain
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("claim %s: %w", c, err)
	}
	cp := Claim(out)
	cp.unknown, cp.encoded = c.unknown, data
	return &cp, nil
}
