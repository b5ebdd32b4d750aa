package devices

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"k8s.io/klog/v2/ktesting"

	"github.com/fastpath-dra/fastpath/test/sysfsfixture"
)

type recorder struct {
	mu   sync.Mutex
	invs []Inventory
}

func (r *recorder) emit(inv Inventory) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.invs = append(r.invs, inv)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.invs)
}

func (r *recorder) last() Inventory {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.invs[len(r.invs)-1]
}

// TestWatchNumVFs drives the watcher on a fake clock: a change of a PF's
// sriov_numvfs is reported once, after the debounce; a resync that finds
// nothing new reports nothing.
func TestWatchNumVFs(t *testing.T) {
	d, root := e810Discoverer(t)
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		rec := &recorder{}
		done := make(chan error)
		go func() {
			done <- d.Watch(ctx, WatchOptions{Debounce: 250 * time.Millisecond, NumVFsPoll: time.Second, Resync: time.Minute}, rec.emit)
		}()
		synctest.Wait()
		if rec.count() != 1 {
			t.Fatalf("%d inventories at start, want 1", rec.count())
		}

		// The second PF gets VFs enabled (the kernel would add the VFs too;
		// the PF's own count is enough to change the inventory).
		numvfs := filepath.Join(root, "sys", "bus", "pci", "devices", "0000:3b:00.1", "sriov_numvfs")
		if err := os.WriteFile(numvfs, []byte("2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the poll sees it
		synctest.Wait()
		if rec.count() != 1 {
			t.Fatalf("reported before the debounce passed")
		}
		time.Sleep(300 * time.Millisecond)
		synctest.Wait()
		if rec.count() != 2 {
			t.Fatalf("%d inventories after the change, want 2", rec.count())
		}
		for _, dev := range rec.last().Devices {
			if dev.Name == "pci-0000-3b-00-1" && dev.PF.NumVFs != 2 {
				t.Errorf("PF numVFs = %d, want 2", dev.PF.NumVFs)
			}
		}

		time.Sleep(2 * time.Minute) // two resyncs, nothing changed
		synctest.Wait()
		if rec.count() != 2 {
			t.Errorf("%d inventories after quiet resyncs, want still 2", rec.count())
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
}

// TestWatchEventsThatNeverStop: events every 100 ms, closer than the
// debounce, do not hold discovery back for ever (the links of pods coming
// and going on a busy node): a change is reported within four debounces
// of the first event, while the events go on.
func TestWatchEventsThatNeverStop(t *testing.T) {
	d, root := e810Discoverer(t)
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		rec := &recorder{}
		triggers := make(chan struct{}, 1)
		trigger := func() {
			select {
			case triggers <- struct{}{}:
			default:
			}
		}
		opts := WatchOptions{Debounce: 250 * time.Millisecond, NumVFsPoll: time.Hour, Resync: time.Hour}
		opts.defaults()
		done := make(chan error)
		go func() {
			done <- d.watchLoop(ctx, opts, triggers, trigger, rec.emit)
		}()
		synctest.Wait()
		numvfs := filepath.Join(root, "sys", "bus", "pci", "devices", "0000:3b:00.1", "sriov_numvfs")
		if err := os.WriteFile(numvfs, []byte("2\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for rec.count() < 2 && time.Since(start) < 3*time.Second {
			trigger()
			time.Sleep(100 * time.Millisecond) // the next event, on the fake clock
			synctest.Wait()
		}
		if took := time.Since(start); rec.count() != 2 || took > time.Second {
			t.Errorf("%d inventories after %s of events every 100ms, want the change reported within 1s", rec.count(), took)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
}

// e810Discoverer discovers a fixture E810 below the sysfs root it returns.
func e810Discoverer(t *testing.T) (*Discoverer, string) {
	t.Helper()
	root := t.TempDir()
	if err := sysfsfixture.E810().Write(root); err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{SysfsRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	return d, root
}

// TestWatchSelect: a new selection is published at once, without waiting
// for the debounce or a resync; a selection that does not compile is
// refused and changes nothing.
func TestWatchSelect(t *testing.T) {
	root := t.TempDir()
	if err := sysfsfixture.E810().Write(root); err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{SysfsRoot: root, Compile: compileCEL})
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		rec := &recorder{}
		done := make(chan error)
		go func() {
			done <- d.Watch(ctx, WatchOptions{Debounce: time.Second, NumVFsPoll: time.Hour, Resync: time.Hour}, rec.emit)
		}()
		synctest.Wait()
		all := len(rec.last().Devices)
		if err := d.Select(Selection{Filter: `device.attributes["fastpath.dev"].kind == "sriov-vf"`, ShareInterfaces: 8}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if rec.count() != 2 {
			t.Fatalf("%d inventories after Select, want 2 at once", rec.count())
		}
		pfs := rec.last().Devices
		if len(pfs) == 0 || len(pfs) >= all {
			t.Fatalf("%d VFs selected of %d devices", len(pfs), all)
		}
		for _, dev := range pfs {
			if dev.Kind != KindSRIOVVF {
				t.Errorf("device %s of kind %s published by a filter of VFs", dev.Name, dev.Kind)
			}
		}
		if err := d.Select(Selection{Filter: `device.attributes[`}); !errors.Is(err, ErrBadOptions) {
			t.Errorf("a filter that does not compile: %v, want ErrBadOptions", err)
		}
		synctest.Wait()
		if rec.count() != 2 || len(rec.last().Devices) != len(pfs) {
			t.Errorf("a refused selection changed the inventory: %d devices", len(rec.last().Devices))
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
}
