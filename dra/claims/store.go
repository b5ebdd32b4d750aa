package claims

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dataplane/hostdir"
)

// Version is the newest checkpoint format this build reads and writes:
// version 3, the checkpoint and its journal (see JournalPath). It writes
// version 2, the whole file at every change, while a daemon of the
// previous release may share the node (SetJournal), migrates version 1,
// and refuses newer versions rather than misread them.
const Version = 3

// Store holds every prepared claim. Its methods are safe for concurrent
// use. Writers of one claim hold its lock (Lock) across their read, side
// effects and Put, so that they see each other's records.
type Store struct {
	path string

	// fileMu orders writes of the files; mu guards claims and the fields
	// below that say so. A write holds fileMu across the file write and mu
	// only to change the map, so readers never wait for the disk.
	fileMu sync.Mutex
	mu     sync.RWMutex
	claims map[Key]*Claim
	// pods indexes claims by their pod's UID (setClaims, apply).
	pods map[types.UID]map[Key]*Claim

	locks Locks[Key]

	// WriteFile writes the checkpoint whole (WriteFileAtomic), or with
	// sync false its pending file (WriteFileUnsynced, see AdmitPending);
	// Append appends to the journal (see appendFile), and Sync syncs it
	// for the lines appended together (syncFile, groupcommit.go). Tests of
	// failed writes (a full disk) set them before the store is used.
	WriteFile func(path string, data []byte, sync bool) error
	Append    func(path string, data []byte, sync bool, at int64) error
	Sync      func(path string) error

	// group is the journal's group commit (groupcommit.go).
	group groupSync

	// shared: another daemon may write the files (see Share); seen is the
	// version of the files this store has. removed: RemoveUnused removed
	// the files, as the daemon stops; reads, rewrites and Hold no longer
	// look at them (nor make the lock file again), and only a claim's
	// change writes them again (see gone). All under mu.
	shared  bool
	seen    stamps
	removed bool

	// journal: changes go to the journal, in version 3 (SetJournal).
	// format, gen, size and tail are the files as this store last read or
	// wrote them: the checkpoint's version (0: none), its generation and
	// size, and the length of the journal's whole entries. All under mu.
	journal    bool
	format     int
	gen        uint64
	size, tail int64

	// allowJournal is what SetJournal said, under mu; journal is it
	// unless peer, a shared store's check before each write, says another
	// daemon may read the files (SetPeerCheck). Nil peer: none is asked.
	allowJournal bool
	peer         func() bool

	// rest is how long after its last change a store that writes version 3
	// rewrites the checkpoint in version 2 (SetRest), its timer restTimer;
	// 0: never. Under mu.
	rest      time.Duration
	restTimer *time.Timer

	// fault is the standing failure to write the files (Fault); nil while
	// they are written. compactFault is the standing failure to compact
	// the journal, which stands until a compaction succeeds (the changes'
	// appends may meanwhile); compactAt the journal's length from which a
	// failed compaction is tried again, compactFailures the failures in a
	// row. All under mu.
	fault, compactFault error
	compactAt           int64
	compactFailures     int

	// Logger logs when the store starts failing to write its files, and
	// when it writes them again: once per fault, not per change. The zero
	// logger logs nothing; the daemon sets it before the store is used.
	Logger klog.Logger

	// corrupt is the records held aside (CorruptError), by their claim's
	// key: their checksum did not match. Under mu.
	corrupt map[Key]*CorruptError

	// extra holds the top-level fields of the checkpoint this build does
	// not know (a newer build wrote them), to write them back; nil for
	// none. Under mu.
	extra json.RawMessage
}

// Open loads the checkpoint at path and its journal, migrating the files
// of the previous releases (see Migrate) first, and the pending write a
// killed process left before it (AdmitPending). A missing checkpoint is an
// empty store. A checkpoint or journal that cannot be read, is corrupt or
// is of a newer version is an error naming the file and what is wrong;
// the files are left as they are. The checkpoint's directory is made, or
// made private to its owner (hostdir.Make). The store writes the journal
// (SetJournal) until Share.
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
	st, err := readLocked(path)
	if err != nil {
		return nil, err
	}
	s := &Store{path: path, journal: true, allowJournal: true, Append: appendFile, Sync: syncFile, WriteFile: func(path string, data []byte, sync bool) error {
		if !sync {
			return WriteFileUnsynced(path, data, 0o600)
		}
		return WriteFileAtomic(path, data, 0o600)
	}}
	if err := s.load(st, legacy); err != nil {
		return nil, err
	}
	return s, nil
}

// state is what the files of a checkpoint hold.
type state struct {
	claims  map[Key]*Claim // nil: no checkpoint
	version int            // the checkpoint's; 0: none
	gen     uint64         // its generation (version 3)
	extra   json.RawMessage
	size    int64 // the checkpoint's length
	tail    int64 // the length of the journal's whole entries
	// corrupt is the records held aside, by their claim's key.
	corrupt map[Key]*CorruptError
}

// readState reads the checkpoint at path and, in version 3, its journal.
// Errors name the file.
func readState(path string) (state, error) {
	data, err := readFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return state{}, nil
	case err != nil:
		return state{}, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	var journal []byte
	if fileVersion(data) == Version {
		journal, err = readFile(JournalPath(path))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return state{}, fmt.Errorf("read journal %s: %w", JournalPath(path), err)
		}
	}
	return decodeState(path, data, journal)
}

// decodeState decodes data, the checkpoint at path, and in version 3 its
// journal. Errors name the file.
func decodeState(path string, data, journal []byte) (state, error) {
	p, err := parse(data)
	claims, version, gen := p.claims, p.version, p.gen
	if _, newer := errors.AsType[*NewerError](err); newer {
		return state{}, withPath(err, path, path)
	}
	if err != nil {
		return state{}, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if version < versionWhole {
		if claims, err = migrateFastpath(data); err != nil {
			return state{}, fmt.Errorf("checkpoint %s (version %d): %w", path, version, err)
		}
	}
	st := state{claims: claims, version: version, gen: gen, extra: p.extra, size: int64(len(data)), corrupt: p.corrupt}
	for _, e := range st.corrupt {
		if e.File == "" {
			e.File = path
		}
	}
	if version == Version {
		r := replayer{file: JournalPath(path), gen: gen, claims: claims, corrupt: st.corrupt, sealed: p.sealed}
		if st.tail, err = r.replay(journal); err != nil {
			return state{}, fmt.Errorf("journal %s: %w", JournalPath(path), err)
		}
		st.corrupt = r.corrupt
	}
	return st, nil
}

// load makes st, what the store's files hold, the store's, and migrates
// the files of the previous release, writing through s.WriteFile.
func (s *Store) load(st state, legacy Legacy) error {
	s.setClaims(st.claims)
	s.extra, s.format, s.gen, s.size, s.tail, s.corrupt = st.extra, st.version, st.gen, st.size, st.tail, st.corrupt
	return s.migrate(legacy, st.version)
}

// Read is what the checkpoint at path and its journal hold, and the
// checkpoint's version (0: there is none), for a reader that does not
// write them (the daemon's tests, a node's inspection). A version 1
// checkpoint is read migrated.
func Read(path string) (map[Key]*Claim, int, error) {
	st, err := readLocked(path)
	return st.claims, st.version, err
}

// readLocked is readStable under the store's file lock, which a daemon
// holds across its whole writes: a compaction replaces the checkpoint and
// then empties the journal and appends to it again, which a read of the
// journal between the two would see mixed.
func readLocked(path string) (state, error) {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return state{}, nil // no store yet: no lock file made
	}
	unlock, err := FileLock(path + ".lock").Lock(context.Background())
	if err != nil {
		return state{}, err
	}
	defer unlock()
	return readStable(path)
}

// readStable is readState, read again while the checkpoint changed
// meanwhile. A daemon's compaction between the reads of the checkpoint and
// of its journal (a new checkpoint, then its journal emptied and appended
// to in the new generation) would hide the journal's entries or show
// entries of a generation newer than the checkpoint read. Its callers
// read under the file lock, under which this build compacts; the stamps
// guard against a writer of an earlier build, which compacted without.
func readStable(path string) (state, error) {
	for {
		before, err := stampOf(path)
		if err != nil {
			return state{}, err
		}
		st, err := readState(path)
		if after, _ := stampOf(path); after == before {
			return st, err
		}
	}
}

// Parse decodes a checkpoint of version 2 or 3, checking every record
// and its checksum, and says which version it is: of version 3, the claims
// of the checkpoint alone, without its journal's (see Read). An older
// version is not decoded (nil claims, its version, no error). A record
// whose checksum does not match is an error (a CorruptError); the records
// it holds aside already are not.
func Parse(data []byte) (map[Key]*Claim, int, error) {
	p, err := parse(data)
	if err == nil && len(p.mismatched) > 0 {
		return nil, p.version, p.mismatched[0]
	}
	return p.claims, p.version, err
}

// parsed is what parse reads of a checkpoint.
type parsed struct {
	claims  map[Key]*Claim
	version int
	gen     uint64
	// extra: its top-level fields this build does not know (nil for
	// none).
	extra json.RawMessage
	// sealed: its checksums were written with its claims (checksum.go);
	// corrupt: the records whose checksum does not match, and those it
	// holds aside, by key.
	sealed  bool
	corrupt map[Key]*CorruptError
	// mismatched: of corrupt, those whose checksum did not match here.
	mismatched []*CorruptError
}

// parse is Parse, with the checkpoint's generation, its top-level fields
// this build does not know, and its records held aside (without their
// file, which the caller names).
func parse(data []byte) (parsed, error) {
	var head struct {
		Version *int `json:"version"`
	}
	if len(data) == 0 {
		return parsed{}, errors.New("the file is empty")
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return parsed{}, fmt.Errorf("not a checkpoint: %w", err)
	}
	version := 0
	if head.Version != nil {
		version = *head.Version
	}
	p := parsed{version: version}
	switch {
	case head.Version == nil:
		return parsed{}, errors.New("not a checkpoint: no version")
	case version > Version:
		return p, &NewerError{Version: version}
	case version < 1:
		return p, fmt.Errorf("version %d is not a checkpoint version", version)
	case version < versionWhole:
		return p, nil
	}
	var cp struct {
		Generation uint64                     `json:"generation"`
		Checksums  map[string]string          `json:"checksums"`
		Claims     map[string]json.RawMessage `json:"claims"`
	}
	if err := json.Unmarshal(data, &cp); err != nil {
		return p, fmt.Errorf("corrupt: %w", err)
	}
	top, err := readTopLevel(data)
	if err == nil {
		p.extra, err = top.unknown()
	}
	if err == nil {
		p.corrupt, err = heldAside(top.values["held"])
	}
	if err != nil {
		return p, fmt.Errorf("corrupt: %w", err)
	}
	if p.corrupt == nil {
		p.corrupt = map[Key]*CorruptError{}
	}
	p.sealed = top.checksumsFirst()
	if version == Version {
		p.gen = cp.Generation // not version 2's: an unknown field of it
	}
	p.claims = make(map[Key]*Claim, len(cp.Claims))
	for k, raw := range cp.Claims {
		if p.sealed {
			if want, got := cp.Checksums[k], checksum(raw); want != got {
				key, err := parseKey(k)
				if err != nil {
					return p, fmt.Errorf("claim %q: %w", k, err)
				}
				reason := fmt.Sprintf("checksum %s, want %s", got, want)
				if want == "" {
					reason = "no checksum"
				}
				e := &CorruptError{Claim: k, Reason: reason, record: raw}
				p.corrupt[key] = e
				p.mismatched = append(p.mismatched, e)
				continue
			}
		}
		var c *Claim
		if err := json.Unmarshal(raw, &c); err != nil {
			return p, fmt.Errorf("claim %q: %w", k, err)
		}
		if err := decoded(c, k); err != nil {
			return p, fmt.Errorf("claim %q: %w", k, err)
		}
		p.claims[c.Key()] = c
		delete(p.corrupt, c.Key()) // a record of its own again
	}
	return p, nil
}

// decoded checks a record read from a file under key, and keeps its
// encoding.
func decoded(c *Claim, key string) error {
	if err := c.check(key); err != nil {
		return err
	}
	var err error
	c.encoded, err = encode(c)
	return err
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
// claim hold it across their whole change. A shared store's lock is the
// node's (lockKey): a daemon it is shared with waits for it too.
func (s *Store) Lock(k Key) (unlock func()) {
	unlock, _ = s.lockKey(context.Background(), k)
	return unlock
}

// LockContext is Lock, waiting for the lock until ctx ends: then the error
// wraps ctx's, and nothing is held. The lock of a claim whose record is
// held aside (Corrupt) is refused, with its CorruptError. Prepare, Unprepare and the runtime's
// hooks wait so, and stop when their caller gives up.
func (s *Store) LockContext(ctx context.Context, k Key) (unlock func(), _ error) {
	if err := s.corruptRecord(k); err != nil {
		return nil, err
	}
	unlock, err := s.lockKey(ctx, k)
	if err != nil && ctx.Err() != nil {
		if unlock != nil {
			unlock()
		}
		return nil, fmt.Errorf("waiting for the claim's lock: %w", ctx.Err())
	}
	// Without the node's file lock (a full disk), the process's lock
	// alone is held, as Lock holds it.
	return unlock, nil
}

// lockKey takes the claim's lock, waiting for it until ctx ends: the
// process's, and a shared store's file lock of the claim (ClaimLockDir),
// which the daemon sharing it takes too. If that file cannot be made (a
// full disk), the process's lock alone is held, and the error says why;
// the store's writes stay coherent (its file lock), only a change that
// reads a record, works and writes it back may then cross one of the
// other daemon's.
func (s *Store) lockKey(ctx context.Context, k Key) (unlock func(), _ error) {
	unlockProcess, err := s.locks.LockContext(ctx, k)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	shared := s.shared
	s.mu.RUnlock()
	if !shared {
		return unlockProcess, nil
	}
	unlockFile, err := lockRemovable(ctx, claimLockPath(s.path, k))
	if err != nil {
		return unlockProcess, err
	}
	return func() {
		unlockFile()
		unlockProcess()
	}, nil
}

// ClaimLockDir is the directory of the node's claim locks of the
// checkpoint at path.
func ClaimLockDir(path string) string { return path + ".locks" }

// claimLockPath is the file of the claim's node-wide lock: named by a hash
// of its key, which holds names from the API.
func claimLockPath(path string, k Key) string {
	sum := sha256.Sum256([]byte(k.String()))
	return filepath.Join(ClaimLockDir(path), hex.EncodeToString(sum[:12])+".lock")
}

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

// Put records the claim, in memory and in the files. If they cannot be
// written, the store is left as it was and the error says why; but for a
// journal appended to that then fails its sync, after which the record
// stays as the journal holds it, and the store's Fault says so.
func (s *Store) Put(c Claim) error {
	return s.change(c.Key(), func(map[Key]*Claim) (*Claim, error) {
		return stored(&c)
	})
}

// PutPending records the claim as Put does, and leaves the durable part of
// the write to run beside the caller, as AdmitPending: once it returns a
// killed process finds the record at its restart, and wait says when it
// outlives a power loss too. For a record of what a power loss undoes
// anyway (a device moved into a pod's namespace, which the machine's
// restart takes away), the caller need not wait.
func (s *Store) PutPending(c Claim) (wait func() error, _ error) {
	return s.changePending(c.Key(), func(map[Key]*Claim) (*Claim, error) {
		return stored(&c)
	})
}

// Delete forgets the claim, in memory and in the files.
func (s *Store) Delete(k Key) error {
	return s.change(k, func(map[Key]*Claim) (*Claim, error) {
		return nil, nil
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
	return s.change(c.Key(), s.admit(c, assign))
}

// AdmitPending admits c as Admit does, and leaves the durable part of the
// write to run beside the caller, who calls wait before counting on the
// record outliving a power loss.
//
// Before AdmitPending returns, the record is written but not synced: in
// version 3 appended to the journal, in version 2 the new checkpoint in its
// pending file (PendingPath). A process killed from then on finds the
// record at its restart (Open replays the journal, or adopts the pending
// file). The sync then runs in the background: the journal's, shared with
// the appends beside it (groupcommit.go); or the pending file's, its
// rename over the checkpoint and the directory's sync, the store writing
// nothing else until they are done. A machine that loses power before
// then finds the files with or without the record, never broken ones: a
// journal entry cut short, or a pending file that does not parse, is
// dropped, and the checkpoint is only ever replaced by a synced file.
func (s *Store) AdmitPending(c Claim) (wait func() error, _ error) {
	return s.AdmitPendingWith(c, nil)
}

// AdmitPendingWith admits c as AdmitPending does, after assign checked or
// completed it in view of every other claim, as AdmitWith.
func (s *Store) AdmitPendingWith(c Claim, assign func(c *Claim, others []*Claim) error) (wait func() error, _ error) {
	return s.changePending(c.Key(), s.admit(c, assign))
}

// changePending is change with the write's durable part left to run in
// the background, the store's next write waiting for it; wait returns
// how it ended.
func (s *Store) changePending(k Key, f func(claims map[Key]*Claim) (*Claim, error)) (wait func() error, _ error) {
	release, durable, err := s.write(k, f, false)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		defer release()
		done <- durable()
	}()
	return sync.OnceValue(func() error { return <-done }), nil
}

// change sets the record of the claim under k to what f returns (nil:
// none) and writes it: the store changes only when the files did. f reads
// every claim (read-only), none changing meanwhile.
func (s *Store) change(k Key, f func(claims map[Key]*Claim) (*Claim, error)) error {
	release, durable, err := s.write(k, f, true)
	if err != nil {
		return err
	}
	defer release()
	return durable()
}

// write is change, but for the durable part of the write, which it
// returns: with sync false, the files are written but not synced until it
// runs (AdmitPending). The store's files are held (fileMu, and a shared
// store's file lock) until release, which the caller runs once durable
// has; a journal's append lets them go at once, its sync shared with the
// appends beside it (groupcommit.go).
func (s *Store) write(k Key, f func(map[Key]*Claim) (*Claim, error), sync bool) (release func(), durable func() error, _ error) {
	s.fileMu.Lock()
	// A change after RemoveUnused (a late runtime hook as the daemon
	// stops) is kept: the files are made again, under the file lock.
	s.mu.Lock()
	s.removed = false
	s.mu.Unlock()
	unlock, err := s.lockShared()
	if err != nil {
		s.fileMu.Unlock()
		return nil, nil, err
	}
	release = func() {
		unlock()
		s.fileMu.Unlock()
	}
	// No other write changes s.claims while fileMu is held: f reads it
	// without mu, beside readers. A record held aside is not replaced.
	rec, err := f(s.claims)
	if cerr := s.corruptRecord(k); cerr != nil {
		err = cerr
	}
	held := true
	if err == nil {
		if durable, held, err = s.commit(k, rec, sync); err != nil {
			s.setFault(err, false)
		}
	}
	if err != nil || !held {
		release()
		release = func() {}
	}
	if err != nil {
		return nil, nil, err
	}
	return release, durable, nil
}

// commit writes the record of the claim under k (nil: none) and makes it
// the store's, and returns the durable part of the write, done already
// with sync. In version 3 (journal on, and the checkpoint of version 3)
// the record is appended to the journal, and its durable part is the
// sync round it joined (groupcommit.go), whatever sync says, which needs
// the files not held (held false); else the checkpoint is written whole,
// in the version the store writes. The caller holds fileMu, and a shared
// store's file lock.
func (s *Store) commit(k Key, rec *Claim, sync bool) (durable func() error, held bool, _ error) {
	done := func() error { return nil }
	s.mu.RLock()
	journal, format, gen, at := s.journal, s.format, s.gen, s.tail
	s.mu.RUnlock()
	if journal && format == Version {
		line, err := entryLine(gen, s.syncedUpTo(gen), k, rec)
		if err != nil {
			return nil, true, err
		}
		err = s.Append(JournalPath(s.path), line, false, at)
		if err == nil {
			end := at + int64(len(line))
			s.apply(k, rec, func() { s.tail = end })
			s.armRest()
			round, lead := s.joinSync(gen, end)
			return func() error { return s.awaitSync(round, lead) }, false, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, true, fmt.Errorf("write journal %s: %w", JournalPath(s.path), err)
		}
		// Removed by hand: the checkpoint, whole, makes it again.
	}
	next := maps.Clone(s.claims)
	if rec == nil {
		delete(next, k)
	} else {
		next[k] = rec
	}
	if sync || journal {
		return done, true, s.writeWhole(next)
	}
	// Version 2's pending write.
	data, err := s.marshal(next, versionWhole, 0)
	if err == nil {
		err = s.WriteFile(PendingPath(s.path), data, false)
	}
	if err != nil {
		_ = os.Remove(PendingPath(s.path))
		return nil, true, fmt.Errorf("write checkpoint %s: %w", PendingPath(s.path), err)
	}
	s.apply(k, rec, func() {})
	return func() error {
		err := commitPending(s.path)
		st, _ := s.stamps()
		s.mu.Lock()
		s.seen, s.format, s.size, s.tail = st, versionWhole, int64(len(data)), 0
		s.mu.Unlock()
		s.setFault(err, false)
		return err
	}, true, nil
}

// apply makes rec the record of the claim under k in memory (nil: none),
// and runs also, under mu, after a write of the files.
func (s *Store) apply(k Key, rec *Claim, also func()) {
	var st stamps
	if s.shared {
		st, _ = s.stamps()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.claims[k]; old != nil {
		delete(s.pods[old.Pod.UID], k)
		if len(s.pods[old.Pod.UID]) == 0 {
			delete(s.pods, old.Pod.UID)
		}
	}
	if rec == nil {
		delete(s.claims, k)
	} else {
		s.claims[k] = rec
		s.indexPod(k, rec)
	}
	s.seen = st
	also()
}

// setClaims makes claims (nil: none) the store's, and indexes them. The
// caller holds mu, or has the store to itself.
func (s *Store) setClaims(claims map[Key]*Claim) {
	if claims == nil {
		claims = map[Key]*Claim{}
	}
	s.claims, s.pods = claims, map[types.UID]map[Key]*Claim{}
	for k, c := range claims {
		s.indexPod(k, c)
	}
}

func (s *Store) indexPod(k Key, c *Claim) {
	if s.pods[c.Pod.UID] == nil {
		s.pods[c.Pod.UID] = map[Key]*Claim{}
	}
	s.pods[c.Pod.UID][k] = c
}

// compact writes the checkpoint whole once the journal is longer than it
// (and than compactMin). A failure (a full disk, on which the changes'
// short appends may still fit) is the store's fault (Fault) until a
// compaction succeeds, and is tried again once the journal has grown by
// the checkpoint's length (or compactMin) again, twice that after a
// second failure, and so on up to 64 times: the changes meanwhile do not
// each pay for a whole write that fails. The journal holds every change
// meanwhile.
func (s *Store) compact() {
	s.mu.RLock()
	due := s.compactDue()
	s.mu.RUnlock()
	if !due {
		return
	}
	if err := s.writeWhole(s.claims); err != nil {
		s.mu.Lock()
		s.compactFailures++
		s.compactAt = s.tail + max(compactMin, s.size)<<min(s.compactFailures-1, 6)
		s.mu.Unlock()
		s.setFault(fmt.Errorf("compact the journal into the checkpoint: %w", err), true)
	}
}

// compactDue says whether the journal is due for compaction (compact).
// The caller holds mu.
func (s *Store) compactDue() bool {
	return s.journal && s.format == Version && s.tail > max(compactMin, s.size) && s.tail >= s.compactAt
}

// Hold calls f with every claim as the store holds them and the records
// it holds aside, read again under a shared store's file lock and with
// that lock held: no daemon of the node changes a claim while f runs. f
// reads the records only, and must not use the store.
func (s *Store) Hold(f func(claims []*Claim, aside []*CorruptError) error) error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if s.gone() {
		// What this store holds is not what another daemon may have
		// written since: f must not act on it.
		return ErrRemoved
	}
	unlock, err := s.lockShared()
	if err != nil {
		return err
	}
	defer unlock()
	s.mu.RLock()
	held, aside := sortedClaims(slices.Collect(maps.Values(s.claims))), sortedCorrupt(s.corrupt)
	s.mu.RUnlock()
	return f(held, aside)
}

// Corrupt lists the records the store holds aside, by claim: their
// checksum did not match when it read them (CorruptError). The store
// serves every other claim; a change of one of these fails until
// `fastpathd checkpoint repair` drops it.
func (s *Store) Corrupt() []*CorruptError {
	s.current()
	s.mu.RLock()
	defer s.mu.RUnlock()
	return sortedCorrupt(s.corrupt)
}

// corruptRecord is the CorruptError of the claim under k, nil if its
// record is not held aside.
func (s *Store) corruptRecord(k Key) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if e := s.corrupt[k]; e != nil {
		return e
	}
	return nil
}

// Fault is the store's standing failure to write its files (a full disk,
// a filesystem gone read-only): the error of the last write that failed,
// until a write succeeds, or else of the last compaction of the journal
// that failed, until a compaction succeeds; nil while the files are
// written. The claims the store holds are as the files are: a write that
// failed changed neither, but for a journal's sync that failed, after
// which its changes stay as the journal holds them (a failed fdatasync
// leaves them on the disk or not); a compaction that failed left the
// journal holding every change.
func (s *Store) Fault() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.faultLocked()
}

func (s *Store) faultLocked() error {
	if s.fault != nil {
		return s.fault
	}
	return s.compactFault
}

// setFault records err (nil: none) as the standing failure of the store's
// writes, or of its compactions, and logs the store's start and end of
// failing.
func (s *Store) setFault(err error, compaction bool) {
	s.mu.Lock()
	before := s.faultLocked()
	if compaction {
		s.compactFault = err
	} else {
		s.fault = err
	}
	after := s.faultLocked()
	s.mu.Unlock()
	s.logFault(before, after)
}

// logFault logs a change of the store's fault from before to after: its
// start and its end, not each change of its error.
func (s *Store) logFault(before, after error) {
	switch {
	case before == nil && after != nil:
		s.Logger.Error(after, "The claim store's files cannot be written; changes that need a write fail until they can", "checkpoint", s.path)
	case before != nil && after == nil:
		s.Logger.Info("The claim store's files are written again", "checkpoint", s.path)
	}
}

// writeWhole writes claims to the checkpoint, whole and synced, and makes
// them the store's: in version 3 with the next generation, after which the
// journal is emptied (a kill in between leaves entries of an older
// generation, which Open skips), or made empty before (from version 2,
// whose journal, if any, is a stale one); in version 2 with the journal,
// if any, removed after. The caller holds fileMu, and a shared store's
// file lock.
func (s *Store) writeWhole(claims map[Key]*Claim) error {
	s.mu.RLock()
	version, format, gen, shared := versionWhole, s.format, s.gen, s.shared
	if s.journal {
		version = Version
	}
	s.mu.RUnlock()
	if !shared {
		// A store of its own takes the file lock for its whole writes
		// alone (a shared store's caller holds it): a daemon starting
		// beside it reads the files under it (Open), never between the
		// new checkpoint and its journal's truncation.
		unlock, err := s.lockFile().Lock(context.Background())
		if err != nil {
			return err
		}
		defer unlock()
	}
	journal := JournalPath(s.path)
	switch {
	case version == Version && format == Version:
		gen++
	case version == Version:
		// The journal's truncation is synced, its directory too, before
		// a checkpoint names generation 1: a power cut must not bring back
		// the entries of an earlier version 3 (of a generation above 1,
		// which would make Open refuse the store).
		gen = 1
		if err := emptyJournal(journal); err != nil {
			return err
		}
		if err := s.Append(journal, nil, true, 0); err != nil {
			return fmt.Errorf("sync the emptied journal %s: %w", journal, err)
		}
		if err := SyncDir(filepath.Dir(journal)); err != nil {
			return err
		}
	default:
		gen = 0
	}
	data, err := s.marshal(claims, version, gen)
	if err != nil {
		return err
	}
	if err := s.WriteFile(s.path, data, true); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", s.path, err)
	}
	var after error
	if version == Version && format == Version {
		after = emptyJournal(journal)
	} else if version == versionWhole {
		after = removeJournal(journal)
	}
	tail := int64(0)
	if after != nil {
		// Its entries are of an older generation: appends follow them.
		if fi, err := os.Lstat(journal); err == nil {
			tail = fi.Size()
		}
	}
	s.wholeWritten(gen)
	st, _ := s.stamps()
	s.mu.Lock()
	s.setClaims(claims)
	s.seen, s.format, s.gen, s.size, s.tail = st, version, gen, int64(len(data)), tail
	before := s.faultLocked()
	s.fault, s.compactFault, s.compactAt, s.compactFailures = nil, nil, 0, 0
	s.mu.Unlock()
	s.logFault(before, nil)
	if version == Version {
		s.armRest()
	}
	return nil
}

// SetRest makes a store that writes version 3 rewrite the checkpoint whole
// in version 2, its journal folded into it, once quiet has passed since
// its last change (0: never, the default). A daemon of the previous
// release, which refuses version 3 at its start, then finds version 2
// whenever the daemon was stopped without a chance to fold it (SIGKILL,
// OOM, a power cut) more than quiet after the last change: a rollback
// while it was down, or a node rebooted into the earlier release. The next
// change writes version 3 again; a burst of changes pays one whole write
// at each end, and appends in between.
func (s *Store) SetRest(quiet time.Duration) {
	s.mu.Lock()
	s.rest = quiet
	if quiet <= 0 && s.restTimer != nil {
		s.restTimer.Stop()
	}
	s.mu.Unlock()
}

// armRest starts the rest timer again, after a change in version 3.
func (s *Store) armRest() {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.rest <= 0:
	case s.restTimer == nil:
		s.restTimer = time.AfterFunc(s.rest, s.settleRest)
	default:
		s.restTimer.Reset(s.rest)
	}
}

// settleRest rewrites a version-3 checkpoint whole in version 2 (SetRest),
// and keeps writing what SetJournal says: the next change writes version
// 3 again. A failure (a full disk) leaves the files as they were, and is
// logged: the store's fault is its writes', which version 3 still takes.
func (s *Store) settleRest() {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	s.mu.RLock()
	// Not once RemoveUnused removed the files: the timer of the last
	// change may fire as the daemon stops, after its state went.
	due := s.rest > 0 && s.format == Version && !s.removed
	s.mu.RUnlock()
	if !due {
		return
	}
	unlock, err := s.lockShared()
	if err != nil {
		s.Logger.Error(err, "The checkpoint could not be rewritten in version 2 at rest", "path", s.path)
		return
	}
	defer unlock()
	s.mu.Lock()
	journal := s.journal
	due = s.format == Version
	s.journal = false
	s.mu.Unlock()
	if due {
		err = s.writeWhole(maps.Clone(s.claims))
	}
	s.mu.Lock()
	s.journal = journal
	s.mu.Unlock()
	if err != nil {
		s.Logger.Error(err, "The checkpoint could not be rewritten in version 2 at rest: a daemon of the previous release started before its next change refuses it", "path", s.path)
	}
}

// SetJournal says whether the store may write version 3, its changes
// appended to the journal (on), or must write version 2, the whole
// checkpoint at every change (off): while a daemon of the previous
// release, which reads version 2 alone, may share the node. The next
// change writes the files in that version.
func (s *Store) SetJournal(on bool) {
	s.mu.Lock()
	s.journal, s.allowJournal = on, on
	s.mu.Unlock()
}

// Fold writes the checkpoint whole in version 2, the journal folded into
// it, unless it is of version 2 already, and keeps writing version 2
// (SetJournal off): for a daemon of the previous release to read it.
func (s *Store) Fold() error { return s.rewrite(false) }

// rewrite writes the checkpoint whole, in version 3 with an empty journal
// or in version 2 (journal false), unless it is of that version already,
// and keeps writing that version.
func (s *Store) rewrite(journal bool) error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if s.gone() {
		return nil // nothing to fold, and no file to make again
	}
	unlock, err := s.lockShared()
	if err != nil {
		return err
	}
	defer unlock()
	want := versionWhole
	if journal {
		want = Version
	}
	s.mu.Lock()
	s.journal, s.allowJournal = journal, journal
	format := s.format
	s.mu.Unlock()
	if format == want {
		return nil
	}
	return s.writeWhole(maps.Clone(s.claims))
}

// Rewrite writes the checkpoint whole now, in the version the store
// writes, its journal folded into it: what a fault (Fault) waits for to
// clear, a write or a compaction that succeeds, without a change of any
// claim. A store that cannot be written is left as it was.
func (s *Store) Rewrite() error {
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if s.gone() {
		return nil
	}
	unlock, err := s.lockShared()
	if err != nil {
		return err
	}
	defer unlock()
	return s.writeWhole(maps.Clone(s.claims))
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
// (ReplaceFile) that a process killed before its rename left beside it,
// and leaves a live write's, which holds its file's lock. The store's
// file lock is held too: the previous release's daemon, sharing the
// store, writes its temporary files (unlocked) under it.
func removeTemps(path string) error {
	stale, err := temps(path)
	if err != nil || len(stale) == 0 {
		return err
	}
	unlock, err := FileLock(path + ".lock").Lock(context.Background())
	if err != nil {
		return err
	}
	defer unlock()
	return removeTempsLocked(path)
}

// removeTempsLocked is removeTemps, its caller holding the file lock.
func removeTempsLocked(path string) error {
	stale, err := temps(path)
	if err != nil {
		return err
	}
	for _, f := range stale {
		if _, err := removeIfUnlocked(f); err != nil {
			return fmt.Errorf("remove %s, left by a write that was killed: %w", f, err)
		}
	}
	return nil
}

// temps lists the temporary files of the checkpoint's writes
// (ReplaceFile) beside it.
func temps(path string) ([]string, error) {
	dir, prefix := filepath.Dir(path), "."+filepath.Base(path)+"."
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint directory: %w", err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) && e.Type().IsRegular() {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
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
func (s *Store) admit(c Claim, assign func(c *Claim, others []*Claim) error) func(map[Key]*Claim) (*Claim, error) {
	return func(claims map[Key]*Claim) (*Claim, error) {
		if err := conflicts(claims, &c); err != nil {
			return nil, err
		}
		if err := s.conflictsAside(&c); err != nil {
			return nil, err
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
				return nil, err
			}
		}
		return stored(&c)
	}
}

// conflictsAside is the conflict of c with a record held aside, nil for
// none: its devices may still be in its pod, so that what it says of
// them, read as it is (its checksum failed), is not given to another
// claim. A record that does not decode says nothing. The caller holds
// fileMu.
func (s *Store) conflictsAside(c *Claim) error {
	s.mu.RLock()
	aside := sortedCorrupt(s.corrupt)
	s.mu.RUnlock()
	for _, e := range aside {
		o := e.decoded()
		if o == nil {
			continue
		}
		if err := conflictWith(o, c); err != nil {
			return fmt.Errorf("%w, whose record is held aside as corrupt (`fastpathd checkpoint verify` shows it; its pod may still hold the device)", err)
		}
	}
	return nil
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

// ErrRemoved is Hold's error once RemoveUnused removed the store's files:
// the daemon stops, and what it holds may no longer be the node's.
var ErrRemoved = errors.New("the claim store's files were removed as the daemon stops")

// gone says whether RemoveUnused removed the files and no change was
// written since. The caller holds fileMu, so that the answer holds until
// it releases it.
func (s *Store) gone() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.removed
}

// lockShared takes a shared store's file lock, reads the file again if
// another daemon wrote it, and asks whether another daemon may read it
// (checkPeer); a store of its own takes nothing. The caller holds fileMu.
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
	s.checkPeer()
	return unlock, nil
}

// marshal encodes the checkpoint of claims in version, of generation gen
// (version 3), with the top-level fields this build does not know of the
// checkpoint it read.
func (s *Store) marshal(claims map[Key]*Claim, version int, gen uint64) ([]byte, error) {
	s.mu.RLock()
	extra, corrupt := s.extra, maps.Clone(s.corrupt)
	s.mu.RUnlock()
	data, err := marshalCheckpoint(claims, version, gen, corrupt)
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

// marshalCheckpoint is the checkpoint of claims in version, of generation
// gen (version 3), as json.Marshal of a checkpoint writes it (claims in key
// order), from the records' encodings, with their checksums before them,
// and the records held aside (corrupt) after them.
func marshalCheckpoint(claims map[Key]*Claim, version int, gen uint64, corrupt map[Key]*CorruptError) ([]byte, error) {
	keys := make([]string, 0, len(claims))
	byKey := make(map[string][]byte, len(claims))
	size := 64
	for k, c := range claims {
		s := k.String()
		data := c.encoded
		if data == nil { // a record the store did not make (tests)
			var err error
			if data, err = encode(c); err != nil {
				return nil, fmt.Errorf("claim %s: %w", k, err)
			}
		}
		keys = append(keys, s)
		byKey[s] = data
		size += 2*len(s) + len(data) + 16
	}
	slices.Sort(keys)
	buf := bytes.NewBuffer(make([]byte, 0, size))
	fmt.Fprintf(buf, `{"version":%d,`, version)
	if err := writeChecksums(buf, keys, byKey); err != nil {
		return nil, err
	}
	if gen != 0 {
		fmt.Fprintf(buf, `"generation":%d,`, gen)
	}
	buf.WriteString(`"claims":{`)
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := writeJSONString(buf, k); err != nil {
			return nil, err
		}
		buf.WriteByte(':')
		buf.Write(byKey[k])
	}
	buf.WriteByte('}')
	if len(corrupt) > 0 {
		if err := writeHeld(buf, corrupt); err != nil {
			return nil, err
		}
	}
	buf.WriteByte('}')
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
	mine := slices.Collect(maps.Values(s.pods[pod]))
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
	return slices.Sorted(maps.Keys(s.pods))
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
