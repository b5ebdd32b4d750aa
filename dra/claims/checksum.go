package claims

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"strings"
)

// The checkpoint and each line of its journal carry checksums (CRC-32C),
// verified when the store reads them, so that a record the disk changed
// (a bit flipped, a block of another file) is not taken for the claim's.
//
// The checkpoint's field "checksums", written right after its version and
// before its claims, holds the checksum of each record's bytes as written
// under its key. Version 2 carries it too: v0.1.0, which reads version 2,
// ignores a field it does not know, and drops it when it writes the file.
// A build that keeps the fields it does not know (an earlier build of
// version 3) writes them back after the claims: checksums that follow the
// claims were carried over by a build that did not compute them, are
// stale, and are ignored; the file is read as one without checksums, as
// v0.1.0's, and its next write checksums it. Checksums before the claims
// were written with them, and each record must match its own.
//
// A journal line ends with its checksum, `,"crc":"…"}`, of the line's
// bytes before it. Once the checkpoint carries checksums, every line of
// its journal must; a journal that follows a checkpoint without them (an
// earlier build's) may hold lines without.
//
// A record whose checksum does not match is held aside (CorruptError):
// the store serves every other claim, and refuses to change that one
// until `fastpathd checkpoint repair` drops it. A journal line whose
// claim cannot be read is held aside under a key of its own
// (journal/gen-G-line-N), the claims served as the other lines leave
// them. A later line of the
// journal for the same claim, which holds its whole record, replaces it.
// The store writes the records it holds aside back, in the checkpoint's
// field "held", so that no compaction drops them unseen.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksum is the checksum of data as the store's files hold it.
func checksum(data []byte) string {
	return fmt.Sprintf("%08x", crc32.Checksum(data, castagnoli))
}

// crcField starts the last field of a journal line: its checksum.
const crcField = `,"crc":"`

// CorruptError is a record of a claim the store read and holds aside: its
// checksum does not match its bytes. Prepare and Unprepare of the claim
// fail with it until `fastpathd checkpoint repair --drop` removes it.
type CorruptError struct {
	// File is the file the record was read from, Line its line (the
	// journal's; 0 for the checkpoint), Claim its key.
	File  string
	Line  int
	Claim string
	// Reason says what is wrong.
	Reason string
	// record is the record's bytes as read, written back in the
	// checkpoint's "held" field.
	record []byte
}

func (e *CorruptError) Error() string {
	where := e.File
	if e.Line > 0 {
		where += fmt.Sprintf(", line %d", e.Line)
	}
	if strings.HasPrefix(e.Claim, unnamedDriver+"/") {
		return fmt.Sprintf("%s is corrupt (%s): it is held aside as %s, and the claims are as the other lines leave them: one of them may lack the change this line held; inspect it with `fastpathd checkpoint verify` and drop it with `fastpathd checkpoint repair --drop %s`",
			where, e.Reason, e.Claim, e.Claim)
	}
	return fmt.Sprintf("the record of claim %s in %s is corrupt (%s): it is held aside; inspect it with `fastpathd checkpoint verify` and drop it with `fastpathd checkpoint repair --drop %s`, then delete and recreate the claim's pod",
		e.Claim, where, e.Reason, e.Claim)
}

// decoded is the claim the record held aside says, read as it is (a
// journal line's claim, or a checkpoint's record): nil if it does not
// decode, or names no claim.
func (e *CorruptError) decoded() *Claim {
	raw := e.record
	var line entry
	if json.Unmarshal(raw, &line) == nil && line.Key != "" {
		raw = line.Claim
	}
	var c Claim
	if len(raw) == 0 || json.Unmarshal(raw, &c) != nil || c.UID == "" || c.Driver == "" {
		return nil
	}
	return &c
}

// held is a record held aside, as the checkpoint's "held" field keeps it.
type held struct {
	File   string `json:"file"`
	Line   int    `json:"line,omitempty"`
	Reason string `json:"reason"`
	Record string `json:"record,omitempty"`
}

// topLevel is the top-level fields of a checkpoint of version 2 or 3 in
// their order, each value's bytes as written.
type topLevel struct {
	keys   []string
	values map[string]json.RawMessage // by the name in lower case
}

// readTopLevel reads the top-level fields of data, a JSON object. Names
// match as encoding/json matches them, regardless of case; of a name
// written twice, the last counts.
func readTopLevel(data []byte) (topLevel, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	t, err := dec.Token()
	if err != nil {
		return topLevel{}, err
	}
	if t != json.Delim('{') {
		return topLevel{}, fmt.Errorf("a JSON %v, not an object", t)
	}
	out := topLevel{values: map[string]json.RawMessage{}}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return topLevel{}, err
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return topLevel{}, err
		}
		out.keys = append(out.keys, name)
		out.values[strings.ToLower(name)] = v
	}
	if _, err := dec.Token(); err != nil {
		return topLevel{}, err
	}
	if dec.More() {
		return topLevel{}, errors.New("data after the object")
	}
	return out, nil
}

// checksumsFirst says whether the checksums precede the claims: written
// with them (see above).
func (t topLevel) checksumsFirst() bool {
	for _, k := range t.keys {
		switch strings.ToLower(k) {
		case "checksums":
			return true
		case "claims":
			return false
		}
	}
	return false
}

// unknown is the fields this build does not know, nil for none.
func (t topLevel) unknown() (json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	for _, k := range t.keys {
		switch strings.ToLower(k) {
		case "version", "claims", "generation", "checksums", "held":
			continue
		}
		fields[k] = t.values[strings.ToLower(k)]
	}
	if len(fields) == 0 {
		return nil, nil
	}
	return json.Marshal(fields)
}

// heldAside is the records a checkpoint's "held" field holds aside.
func heldAside(raw json.RawMessage) (map[Key]*CorruptError, error) {
	if raw == nil {
		return nil, nil
	}
	var fields map[string]held
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, fmt.Errorf("held: %w", err)
	}
	out := map[Key]*CorruptError{}
	for k, h := range fields {
		key, err := parseKey(k)
		if err != nil {
			return nil, fmt.Errorf("held: %w", err)
		}
		out[key] = &CorruptError{File: h.File, Line: h.Line, Claim: k, Reason: h.Reason, record: []byte(h.Record)}
	}
	return out, nil
}

// writeChecksums writes the checkpoint's "checksums" field, and a comma,
// for the records under keys (sorted) of byKey.
func writeChecksums(buf *bytes.Buffer, keys []string, byKey map[string][]byte) error {
	buf.WriteString(`"checksums":{`)
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := writeJSONString(buf, k); err != nil {
			return err
		}
		buf.WriteString(`:"`)
		buf.WriteString(checksum(byKey[k]))
		buf.WriteByte('"')
	}
	buf.WriteString("},")
	return nil
}

// writeHeld writes the checkpoint's "held" field, a comma before it, for
// the records held aside.
func writeHeld(buf *bytes.Buffer, corrupt map[Key]*CorruptError) error {
	fields := map[string]held{}
	for k, e := range corrupt {
		fields[k.String()] = held{File: e.File, Line: e.Line, Reason: e.Reason, Record: string(e.record)}
	}
	data, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	buf.WriteString(`,"held":`)
	buf.Write(data)
	return nil
}

// sealLine ends the journal line line (without its closing brace and
// newline) with its checksum.
func sealLine(buf *bytes.Buffer) {
	sum := checksum(buf.Bytes())
	buf.WriteString(crcField)
	buf.WriteString(sum)
	buf.WriteString("\"}\n")
}

// openLine checks the checksum of a journal line (without its newline):
// what the line holds, and whether it had a checksum. A line whose
// checksum does not match is an error.
func openLine(raw []byte) (sealed bool, _ error) {
	// `,"crc":"` cannot be within a JSON string (its quotes would be
	// escaped): the line's last one starts its checksum.
	const tail = len(crcField) + 8 + 2
	i := bytes.LastIndex(raw, []byte(crcField))
	if i < 0 {
		return false, nil
	}
	if len(raw)-i != tail || !bytes.HasSuffix(raw, []byte(`"}`)) {
		return true, errors.New("its checksum is cut or misplaced")
	}
	want := string(raw[i+len(crcField) : i+len(crcField)+8])
	if got := checksum(raw[:i]); got != want {
		return true, fmt.Errorf("checksum %s, want %s", got, want)
	}
	return true, nil
}

// lineKey is the key a journal line names, read as it was written (the
// line may not decode): "" if it cannot be read.
func lineKey(raw []byte) string {
	var e struct {
		Key string `json:"key"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Key != "" {
		return e.Key
	}
	_, rest, ok := bytes.Cut(raw, []byte(`,"key":`))
	if !ok {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(rest))
	var k string
	if dec.Decode(&k) != nil {
		return ""
	}
	return k
}

// Verify reads the checkpoint at path and its journal under the store's
// file lock, as Open would, and says how many claims they hold and which
// records are held aside (CorruptError), for an operator's inspection
// (`fastpathd checkpoint verify`). It writes nothing.
func Verify(path string) (claims int, corrupt []*CorruptError, _ error) {
	unlock, err := FileLock(path + ".lock").Lock(context.Background())
	if err != nil {
		return 0, nil, err
	}
	defer unlock()
	st, err := readStable(path)
	if err != nil {
		return 0, nil, err
	}
	return len(st.claims), sortedCorrupt(st.corrupt), nil
}

// sortedCorrupt lists corrupt by claim.
func sortedCorrupt(corrupt map[Key]*CorruptError) []*CorruptError {
	out := slices.Collect(maps.Values(corrupt))
	slices.SortFunc(out, func(a, b *CorruptError) int { return strings.Compare(a.Claim, b.Claim) })
	return out
}

// Repair drops the records of the claims under drop (their keys, as
// CorruptError names them) that the store at path holds aside, and writes
// the checkpoint whole without them, in the version it is of, under the
// store's file lock. A key that is not held aside is an error, and
// nothing is written: a claim the store serves is unprepared through its
// pod, not here. No daemon should run on the node meanwhile.
func Repair(path string, legacy Legacy, drop []string) error {
	s, err := Open(path, legacy)
	if err != nil {
		return err
	}
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	unlock, err := s.lockFile().Lock(context.Background())
	if err != nil {
		return err
	}
	defer unlock()
	s.mu.Lock()
	s.shared, s.seen = true, stamps{checkpoint: stamp{size: -1}} // read again
	s.mu.Unlock()
	if err := s.refresh(); err != nil {
		return err
	}
	s.mu.Lock()
	s.journal = s.format == Version
	var errs []error
	for _, k := range drop {
		key, err := parseKey(k)
		if err == nil && s.corrupt[key] == nil {
			err = errors.New("not held aside: its record is not corrupt")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("claim %s: %w", k, err))
			continue
		}
		delete(s.corrupt, key)
	}
	s.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("checkpoint %s not repaired, nothing was written: %w", path, err)
	}
	return s.writeWhole(maps.Clone(s.claims))
}
