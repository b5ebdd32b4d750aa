package claims

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
)

// Version 3 keeps a journal beside the checkpoint (JournalPath): a change
// appends the claim's new record, or its deletion, to the journal and
// syncs the journal alone, so that a change costs the same on a node of
// one claim as on a node of ten thousand. Once the journal has grown past
// the checkpoint, the checkpoint is written again, whole, with the next
// generation, and the journal emptied: its entries of an older generation
// are in the checkpoint, and a kill between the two writes leaves nothing
// to undo.
//
// The previous release reads version 2 alone, the whole checkpoint in one
// file. While a daemon that may be of that release shares the node
// (SetJournal), the store writes version 2, the whole file at every
// change, and folds the journal into it.

// versionWhole is the version written whole, without a journal.
const versionWhole = 2

// compactMin is the journal's length below which it is never compacted,
// however small the checkpoint.
var compactMin int64 = 256 << 10 // a variable for tests

// JournalPath is the journal of the checkpoint at path (version 3).
func JournalPath(path string) string { return path + ".journal" }

// entry is a line of the journal: the record of the claim stored under
// Key, or its deletion (no Claim). Synced is the journal's length its
// writer knew synced when it appended the line (see groupcommit.go); a
// line without it (an earlier build, which synced every line before the
// next) counts its own offset.
type entry struct {
	Generation uint64          `json:"generation"`
	Synced     *int64          `json:"synced,omitempty"`
	Key        string          `json:"key"`
	Claim      json.RawMessage `json:"claim,omitempty"`
}

// entryLine is the journal's line for the change of the claim under k to
// rec (nil: deleted), in generation gen, the journal known synced up to
// synced, ending with its checksum.
func entryLine(gen uint64, synced int64, k Key, rec *Claim) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(`{"generation":`)
	buf.WriteString(strconv.FormatUint(gen, 10))
	buf.WriteString(`,"synced":`)
	buf.WriteString(strconv.FormatInt(synced, 10))
	buf.WriteString(`,"key":`)
	if err := writeJSONString(&buf, k.String()); err != nil {
		return nil, err
	}
	if rec != nil {
		data := rec.encoded
		if data == nil {
			var err error
			if data, err = encode(rec); err != nil {
				return nil, fmt.Errorf("claim %s: %w", k, err)
			}
		}
		buf.WriteString(`,"claim":`)
		if bytes.IndexByte(data, '\n') >= 0 {
			if err := json.Compact(&buf, data); err != nil {
				return nil, fmt.Errorf("claim %s: %w", k, err)
			}
		} else {
			buf.Write(data)
		}
	}
	sealLine(&buf)
	return buf.Bytes(), nil
}

// replayer replays the journal file of the checkpoint of generation gen
// on its claims, and the records held aside (corrupt). sealed: the
// checkpoint carries checksums, and so must every line.
type replayer struct {
	file    string
	gen     uint64
	claims  map[Key]*Claim
	corrupt map[Key]*CorruptError
	sealed  bool
}

// replay applies the journal data to the claims, and returns the length
// of its whole entries. The bytes after the last newline are an entry cut
// by a kill or a power loss, which was never synced, so never counted on:
// the next append overwrites them. Entries of an older generation are in
// the checkpoint already. A whole entry whose checksum does not match (or
// that has none, after a checkpoint with checksums) is held aside by its
// claim's key, which a later entry of the claim replaces; but for one
// holding zero bytes that no later entry says was synced (cutBatch): a
// power cut tore it before its sync (the filesystem extended the file, the
// data did not follow), and it and every entry after it, appended
// before the same sync or after it, were never acknowledged. They are a
// cut batch, dropped: the next append overwrites them. A whole entry
// that does not decode and names no claim, or that is of a newer
// generation, or whose record is not valid, is an error naming its line:
// the journal is corrupt.
func (r *replayer) replay(data []byte) (tail int64, _ error) {
	if r.corrupt == nil {
		r.corrupt = map[Key]*CorruptError{}
	}
	for line := 1; ; line++ {
		i := bytes.IndexByte(data[tail:], '\n')
		if i < 0 {
			return tail, nil
		}
		raw := data[tail : tail+int64(i)]
		start := tail
		tail += int64(i) + 1
		sealed, err := openLine(raw)
		if err == nil && r.sealed && !sealed {
			err = errors.New("no checksum")
		}
		if err != nil && bytes.IndexByte(raw, 0) >= 0 && r.cutBatch(data[tail:], tail, start) {
			// Zeros where its bytes were not written: an append a power
			// cut tore before its sync, never acknowledged, nor any
			// after it. The next append overwrites them.
			return start, nil
		}
		if err != nil {
			if err := r.holdAside(raw, line, err); err != nil {
				return 0, err
			}
			continue
		}
		var e entry
		if err := json.Unmarshal(raw, &e); err != nil {
			return 0, fmt.Errorf("line %d: %w", line, err)
		}
		switch {
		case e.Generation > r.gen:
			return 0, fmt.Errorf("line %d: generation %d, newer than the checkpoint's (%d)", line, e.Generation, r.gen)
		case e.Generation < r.gen:
			continue
		case len(e.Claim) == 0:
			k, err := parseKey(e.Key)
			if err != nil {
				return 0, fmt.Errorf("line %d: %w", line, err)
			}
			delete(r.claims, k)
			delete(r.corrupt, k)
			continue
		}
		var c *Claim
		if err := json.Unmarshal(e.Claim, &c); err != nil {
			return 0, fmt.Errorf("line %d: %w", line, err)
		}
		if err := decoded(c, e.Key); err != nil {
			return 0, fmt.Errorf("line %d, claim %q: %w", line, e.Key, err)
		}
		r.claims[c.Key()] = c
		delete(r.corrupt, c.Key())
	}
}

// cutBatch says whether a line torn at offset at, followed by the journal
// data rest from offset from, is the start of a cut batch: no whole line
// of rest, of the journal's generation, says the journal was synced beyond
// at when it was appended. A later line that does says the torn one had
// been synced, and was damaged since: corruption.
func (r *replayer) cutBatch(rest []byte, from, at int64) bool {
	offset := from
	for _, raw := range bytes.SplitAfter(rest, []byte{'\n'}) {
		line := offset
		offset += int64(len(raw))
		raw, whole := bytes.CutSuffix(raw, []byte{'\n'})
		if !whole {
			break
		}
		if _, err := openLine(raw); err != nil {
			continue
		}
		var head struct {
			Generation uint64 `json:"generation"`
			Synced     *int64 `json:"synced"`
		}
		if json.Unmarshal(raw, &head) != nil || head.Generation != r.gen {
			continue
		}
		synced := line // written by a build that synced each line before the next
		if head.Synced != nil {
			synced = *head.Synced
		}
		if synced > at {
			return false
		}
	}
	return true
}

// holdAside holds aside the record of the journal's line raw, numbered
// line, whose checksum is wrong (why), unless it is of an older
// generation (in the checkpoint already). A line whose claim cannot be
// read is held aside under a key of its own (unnamedLine): the claims
// stay as the other lines leave them, one of them perhaps without the
// change it held.
func (r *replayer) holdAside(raw []byte, line int, why error) error {
	var head struct {
		Generation *uint64 `json:"generation"`
	}
	if json.Unmarshal(raw, &head) == nil && head.Generation != nil && *head.Generation < r.gen {
		return nil
	}
	name := lineKey(raw)
	k, err := parseKey(name)
	if err != nil {
		k = unnamedLine(r.gen, line)
		r.corrupt[k] = &CorruptError{File: r.file, Line: line, Claim: k.String(), Reason: why.Error() + ", and it names no claim",
			record: bytes.Clone(raw)}
		return nil
	}
	delete(r.claims, k)
	r.corrupt[k] = &CorruptError{File: r.file, Line: line, Claim: name, Reason: why.Error(), record: bytes.Clone(raw)}
	return nil
}

// unnamedDriver is the driver of the keys of the journal's lines held
// aside that name no claim: no claim's driver.
const unnamedDriver = "journal"

// unnamedLine is the key a journal line that names no claim is held aside
// under: line of the journal of the checkpoint of generation gen.
func unnamedLine(gen uint64, line int) Key {
	return Key{Driver: unnamedDriver, UID: types.UID(fmt.Sprintf("gen-%d-line-%d", gen, line))}
}

// parseKey is the key whose String is s.
func parseKey(s string) (Key, error) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			if i == 0 || i == len(s)-1 {
				break
			}
			return Key{Driver: s[:i], UID: types.UID(s[i+1:])}, nil
		}
	}
	return Key{}, fmt.Errorf("key %q: not a driver and a UID", s)
}

// appendFile writes data to the journal at path at offset at, its length
// up to its last whole entry: whatever a kill or a power loss left after
// that is overwritten. With sync, the journal is synced (fdatasync) before
// it returns. A write that fails leaves the journal as it was. The journal
// must exist (writeWhole makes it): a missing one is os.ErrNotExist's
// error, and the store then writes the checkpoint whole.
func appendFile(path string, data []byte, sync bool, at int64) error {
	f, err := openFile(path, os.O_WRONLY|safeFlags, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(data, at); err != nil {
		_ = f.Truncate(at)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if fi, err := f.Stat(); err == nil && fi.Size() > at+int64(len(data)) {
		// An entry cut before: the bytes beyond this one's end.
		if err := f.Truncate(at + int64(len(data))); err != nil {
			return fmt.Errorf("truncate %s: %w", path, err)
		}
	}
	if sync {
		if err := syncData(f); err != nil {
			_ = f.Truncate(at)
			return fmt.Errorf("sync %s: %w", path, err)
		}
	}
	return nil
}

// syncFile syncs the data of the store's file at path (fdatasync).
func syncFile(path string) error {
	f, err := openFile(path, os.O_RDONLY|safeFlags, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syncData(f); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

func syncData(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// emptyJournal empties the journal at path, making it if there is none.
func emptyJournal(path string) error {
	f, err := openFile(path, os.O_WRONLY|os.O_CREATE|safeFlags, 0o600)
	if err != nil {
		return fmt.Errorf("journal %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("empty the journal %s: %w", path, err)
	}
	return nil
}

// removeJournal removes the journal at path, if there is one.
func removeJournal(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the journal %s: %w", path, err)
	}
	return nil
}
