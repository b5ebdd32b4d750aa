package claims

import (
	"fmt"
	"sync"
)

// The journal's group commit. A change appended to the journal is not
// synced by its writer while it holds the store's files: it joins the
// open sync round and lets the files go, and one syncer (syncRounds)
// syncs the journal for every line of the round at once, while the lines
// of the next round are appended. Writes of different claims that come
// together (the kubelet's Prepares of a burst of pods) pay one sync
// between them instead of one each, one after another; a write alone pays
// what it did, its sync beginning as soon as its line is appended.
//
// A power cut can now tear a line that has lines after it: the appends of
// one round, or of the next while the round's sync ran, none synced. Each
// line says how far its writer knew the journal synced (entry.Synced),
// and a line torn with zeros that no later line says was synced begins a
// batch no writer was told was written: replay drops it and every line
// after it (cutBatch). A torn line that a later line says was synced was
// damaged after its sync, and is held aside as before.

// syncRound is one sync of the journal, for the lines appended since the
// round before it closed. Their writers wait for done, then read err.
type syncRound struct {
	gen  uint64 // the generation of its last line
	end  int64  // the journal's length after its last line
	last uint64 // the count of lines appended, its last line's included
	done chan struct{}
	err  error
}

// groupSync is the state of the journal's group commit, under its mu.
type groupSync struct {
	mu sync.Mutex
	// appended counts the lines appended to the journal; whole is what it
	// was at the last whole write of the checkpoint (writeWhole), which
	// holds every line appended before it, synced.
	appended, whole uint64
	// synced is the journal's length known synced in generation gen: the
	// Synced of the next line, if the journal is still of gen.
	gen    uint64
	synced int64
	// open is the round lines join (nil: none yet); running: a syncer
	// runs, and will close it.
	open    *syncRound
	running bool
}

// syncedUpTo is how far the journal of generation gen is known synced:
// what a line appended now says (entry.Synced). The caller holds fileMu.
func (s *Store) syncedUpTo(gen uint64) int64 {
	g := &s.group
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gen != gen {
		return 0
	}
	return g.synced
}

// joinSync counts a line appended to the journal of generation gen, which
// now ends at end, into the open sync round, opening one if there is none.
// lead says the caller is to sync it (awaitSync): no sync runs. The caller
// holds fileMu, so that the lines join the rounds in the journal's order.
func (s *Store) joinSync(gen uint64, end int64) (_ *syncRound, lead bool) {
	g := &s.group
	g.mu.Lock()
	defer g.mu.Unlock()
	g.appended++
	if g.open == nil {
		g.open = &syncRound{done: make(chan struct{})}
	}
	r := g.open
	r.gen, r.end, r.last = gen, end, g.appended
	lead = !g.running
	g.running = true
	return r, lead
}

// syncRounds syncs the journal for the open round, and, unless once, for
// each round opened meanwhile, until none is; with once, a round opened
// meanwhile is left to a syncer of its own. A writer that opened a round
// when no sync ran syncs it once itself, so that a write alone costs its
// sync and no more. A failed sync fails every line of its round, but for
// lines a whole write of the checkpoint took since (compaction, or
// another write's whole rewrite): their changes are in a synced
// checkpoint.
func (s *Store) syncRounds(once bool) {
	g := &s.group
	for {
		g.mu.Lock()
		r := g.open
		if r == nil {
			g.running = false
			g.mu.Unlock()
			return
		}
		g.open = nil
		g.mu.Unlock()

		err := s.Sync(JournalPath(s.path))

		g.mu.Lock()
		switch {
		case r.last <= g.whole:
			err = nil
		case err == nil && (r.gen != g.gen || r.end > g.synced):
			// No whole write since the round's last line: the journal
			// is the one it was appended to, synced up to its end.
			g.gen, g.synced = r.gen, r.end
		}
		r.err = err
		next := g.open != nil
		if once && !next {
			g.running = false
		}
		g.mu.Unlock()
		close(r.done)
		if once {
			if next {
				go s.syncRounds(false)
			}
			return
		}
	}
}

// wholeWritten records that the claims were written whole (or their files
// removed, holding none), with every line appended so far: in generation
// gen, whose journal is known synced up to none of it. The caller holds
// fileMu.
func (s *Store) wholeWritten(gen uint64) {
	g := &s.group
	g.mu.Lock()
	defer g.mu.Unlock()
	g.whole = g.appended
	g.gen, g.synced = gen, 0
}

// awaitSync waits for the round r's sync of the journal, syncing it with
// lead (joinSync), and compacts the journal once that leaves it due. A failed sync is the store's fault
// (Fault) and the write's error; the record stays in memory and in the
// journal, as the change of a record whose file cannot be synced may or
// may not outlive a power cut.
func (s *Store) awaitSync(r *syncRound, lead bool) error {
	if lead {
		s.syncRounds(true)
	}
	<-r.done
	if r.err != nil {
		err := fmt.Errorf("sync the journal %s: %w", JournalPath(s.path), r.err)
		s.setFault(err, false)
		return err
	}
	s.setFault(nil, false)
	s.mu.RLock()
	due := s.compactDue()
	s.mu.RUnlock()
	if !due {
		return nil
	}
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	unlock, err := s.lockShared()
	if err != nil {
		// The change is synced; the next write compacts.
		return nil
	}
	defer unlock()
	if !s.gone() {
		s.compact()
	}
	return nil
}
