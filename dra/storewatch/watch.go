package storewatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/metrics"
)

// ErrNotWritable is the error of a store that cannot be written (Err).
var ErrNotWritable = errors.New("the claim store cannot be written")

// The reasons of the events on the Node.
const (
	ReasonNotWritable = "ClaimStoreNotWritable"
	ReasonWritable    = "ClaimStoreWritable"
)

// DefaultMinFree is the free space the store's filesystem keeps beyond
// twice the store's files (Options.MinFree).
const DefaultMinFree = 1 << 20

// Options configure a Watcher.
type Options struct {
	Store *claims.Store
	// NodeName is the node the events are written on, through Events
	// (nil: none).
	NodeName string
	Events   record.EventRecorder
	// Metrics gets fastpath_store_fault, fastpath_store_free_bytes and
	// fastpath_store_writes_failed_total; nil for none.
	Metrics *metrics.Metrics
	// MinFree is the free space the filesystem of the store must have
	// beyond twice the checkpoint's and journal's size (a compaction
	// writes the checkpoint whole beside the old one) for new claims to be
	// admitted: below it, the claims prepared still have room for their
	// hooks and Unprepare. Default DefaultMinFree.
	MinFree uint64
	// Interval is how often the filesystem is looked at, and a store that
	// failed a write tried again once it has room. Default 10s.
	Interval time.Duration
}

// Watcher says whether the claim store can be written (Err), and reports
// each change on the Node (Run).
type Watcher struct {
	opts Options

	mu sync.Mutex
	// faulted is what was last reported: the store could not be written.
	faulted bool
}

// New returns a watcher of opts.Store; Run runs it. It counts the store's
// failed writes in opts.Metrics, through the store's WriteFile, Append and Sync,
// which must not be in use yet.
func New(opts Options) *Watcher {
	if opts.MinFree == 0 {
		opts.MinFree = DefaultMinFree
	}
	if opts.Interval == 0 {
		opts.Interval = 10 * time.Second
	}
	w := &Watcher{opts: opts}
	s, m := opts.Store, opts.Metrics
	write, appendFile, syncFile := s.WriteFile, s.Append, s.Sync
	s.WriteFile = func(path string, data []byte, sync bool) error {
		return counted(m, write(path, data, sync))
	}
	s.Append = func(path string, data []byte, sync bool, at int64) error {
		return counted(m, appendFile(path, data, sync, at))
	}
	s.Sync = func(path string) error {
		return counted(m, syncFile(path))
	}
	m.Gauge("store_fault", "1 while the claim store cannot be written (a failed write, or less free space than its writes take): new claims are refused; else 0.", func() float64 {
		if w.Err() != nil {
			return 1
		}
		return 0
	})
	m.Gauge("store_free_bytes", "Free space of the claim store's filesystem (for unprivileged users).", func() float64 {
		free, _, err := w.free()
		if err != nil {
			return 0
		}
		return float64(free)
	})
	return w
}

// counted records err, a failed write of the store's files, in m. A
// journal that is not there (removed by hand) is no failure: the store
// writes the checkpoint whole instead.
func counted(m *metrics.Metrics, err error) error {
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return err
	}
	errno := "other"
	var e syscall.Errno
	if errors.As(err, &e) {
		switch e {
		case syscall.ENOSPC:
			errno = "ENOSPC"
		case syscall.EDQUOT:
			errno = "EDQUOT"
		case syscall.EROFS:
			errno = "EROFS"
		case syscall.EIO:
			errno = "EIO"
		}
	}
	m.StoreWriteFailed(errno)
	return err
}

// Err says why the store cannot be written now, nil while it can: the
// store's own fault (the last write failed, claims.Store.Fault), else a
// filesystem with less free space than MinFree beyond twice the store's
// files, or with no free inode. It wraps ErrNotWritable and says what to
// do; the drivers refuse new claims while it is not nil, and the
// readiness probe fails with it.
func (w *Watcher) Err() error {
	err := w.opts.Store.Fault()
	if err == nil {
		err = w.room()
	}
	if err != nil {
		return notWritable(w.opts.Store, err)
	}
	return nil
}

func notWritable(s *claims.Store, cause error) error {
	return fmt.Errorf("%w: %w; new claims are refused until it can be: free space on the filesystem of %s, or make it writable",
		ErrNotWritable, cause, filepath.Dir(s.Path()))
}

// room says why the store's filesystem has no room for its writes, nil
// when it has.
func (w *Watcher) room() error {
	free, inodes, err := w.free()
	if err != nil {
		return err
	}
	dir := filepath.Dir(w.opts.Store.Path())
	if inodes == 0 {
		return fmt.Errorf("the filesystem of %s has no free inode", dir)
	}
	need := w.opts.MinFree + 2*(size(w.opts.Store.Path())+size(claims.JournalPath(w.opts.Store.Path())))
	if free < need {
		return fmt.Errorf("the filesystem of %s has %s free, less than the %s the store keeps for its writes, %s and twice its checkpoint and journal",
			dir, formatBytes(free), formatBytes(need), formatBytes(w.opts.MinFree))
	}
	return nil
}

// free is the free space of the store's filesystem, for unprivileged
// users, and its free inodes (1 if it does not count them).
func (w *Watcher) free() (free, inodes uint64, _ error) {
	dir := filepath.Dir(w.opts.Store.Path())
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	inodes = st.Ffree
	if st.Files == 0 {
		inodes = 1 // tmpfs with nr_inodes=0, and filesystems that do not count
	}
	return st.Bavail * uint64(st.Bsize), inodes, nil
}

func size(path string) uint64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return uint64(fi.Size())
}

// formatBytes says n in KiB or MiB.
func formatBytes(n uint64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Run checks the store (Check) now and every Interval until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	tick := time.NewTicker(w.opts.Interval)
	defer tick.Stop()
	for {
		w.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Check looks at the store and reports a change since the last look: a
// Warning event ClaimStoreNotWritable on the Node, and an error logged,
// when it can no longer be written, a Normal event ClaimStoreWritable when
// it can again. A store whose last write or compaction failed is written
// whole once its filesystem has room again (Store.Rewrite): its fault
// stays until a write succeeds, and with new claims refused and none to
// unprepare, none may come.
func (w *Watcher) Check(ctx context.Context) {
	s := w.opts.Store
	if s.Fault() != nil && w.room() == nil {
		_ = s.Rewrite() // its error is the store's fault
	}
	err := w.Err()
	w.mu.Lock()
	was := w.faulted
	w.faulted = err != nil
	w.mu.Unlock()
	logger := klog.FromContext(ctx)
	switch {
	case err != nil && !was:
		logger.Error(err, "The claim store cannot be written: new claims are refused", "checkpoint", s.Path())
		w.event(corev1.EventTypeWarning, ReasonNotWritable, err.Error())
	case err == nil && was:
		logger.Info("The claim store is written again: new claims are prepared", "checkpoint", s.Path())
		w.event(corev1.EventTypeNormal, ReasonWritable, fmt.Sprintf("the claim store %s is written again: new claims are prepared", s.Path()))
	}
}

func (w *Watcher) event(kind, reason, msg string) {
	if w.opts.Events == nil {
		return
	}
	w.opts.Events.Event(&corev1.ObjectReference{Kind: "Node", Name: w.opts.NodeName, UID: types.UID(w.opts.NodeName)}, kind, reason, msg)
}
