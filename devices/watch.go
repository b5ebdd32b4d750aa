package devices

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// WatchOptions tune Watch. Zero values take the defaults.
type WatchOptions struct {
	// Debounce is how long events must be quiet before discovery reruns:
	// creating 64 VFs is one discovery, not 64. Default 250ms. Events
	// that never stop (links of pods coming and going on a busy node)
	// delay it by at most four times as long.
	Debounce time.Duration
	// Resync reruns discovery on a slow timer, for changes no event reports
	// (link speed, say). Default 5m.
	Resync time.Duration
	// NumVFsPoll is how often the PFs' sriov_numvfs files are read for
	// changes. Default 2s.
	NumVFsPoll time.Duration
	// Clock is injected by tests. Default: the real clock.
	Clock clock.WithTicker
}

func (o *WatchOptions) defaults() {
	if o.Debounce <= 0 {
		o.Debounce = 250 * time.Millisecond
	}
	if o.Resync <= 0 {
		o.Resync = 5 * time.Minute
	}
	if o.NumVFsPoll <= 0 {
		o.NumVFsPoll = 2 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// Watch emits the inventory now and again each time it changes, until ctx
// ends. Discovery reruns on netlink link events (live host; those of pods'
// interfaces only once published), on changes of any PF's sriov_numvfs,
// on changes in the memif directory and on a slow timer, debounced; an
// inventory equal to the last one is not emitted.
func (d *Discoverer) Watch(ctx context.Context, opts WatchOptions, emit func(Inventory)) error {
	opts.defaults()
	triggers := make(chan struct{}, 1)
	trigger := func() {
		select {
		case triggers <- struct{}{}:
		default:
		}
	}
	if d.sysfs.live() {
		if err := watchLinks(ctx, trigger, d.knownNetdev); err != nil {
			return err
		}
	}
	if d.opts.MemifDir != "" {
		stop, err := watchDir(ctx, d.opts.MemifDir, trigger)
		if err != nil {
			return err
		}
		defer stop()
	}
	return d.watchLoop(ctx, opts, triggers, trigger, emit)
}

func (d *Discoverer) watchLoop(ctx context.Context, opts WatchOptions, triggers <-chan struct{}, trigger func(), emit func(Inventory)) error {
	logger := klog.FromContext(ctx)
	reselected := make(chan struct{}, 1)
	d.mu.Lock()
	d.reselected = reselected
	d.mu.Unlock()
	last, err := d.Discover(ctx)
	if err != nil {
		return err
	}
	d.setKnown(last)
	emit(last)
	numVFs := d.numVFs()
	poll := opts.Clock.NewTicker(opts.NumVFsPoll)
	defer poll.Stop()
	resync := opts.Clock.NewTicker(opts.Resync)
	defer resync.Stop()
	var debounce clock.Timer
	var fire <-chan time.Time
	// first is when the first event not yet discovered came.
	var first time.Time
	for {
		select {
		case <-ctx.Done():
			if debounce != nil {
				debounce.Stop()
			}
			return nil
		case <-poll.C():
			if now := d.numVFs(); now != numVFs {
				numVFs = now
				trigger()
			}
		case <-resync.C():
			trigger()
		case <-reselected:
			// A new selection: at once, not debounced.
			inv, err := d.Discover(ctx)
			if err != nil {
				logger.Error(err, "Discovery failed; keeping the last inventory")
				continue
			}
			if !inv.Equal(last) {
				last = inv
				d.setKnown(inv)
				emit(inv)
			}
		case <-triggers:
			now := opts.Clock.Now()
			if fire == nil {
				first = now
			}
			wait := min(opts.Debounce, first.Add(4*opts.Debounce).Sub(now))
			if debounce == nil {
				debounce = opts.Clock.NewTimer(wait)
			} else {
				debounce.Stop()
				debounce.Reset(wait)
			}
			fire = debounce.C()
		case <-fire:
			fire = nil
			inv, err := d.Discover(ctx)
			if err != nil {
				logger.Error(err, "Discovery failed; keeping the last inventory")
				continue
			}
			if !inv.Equal(last) {
				last = inv
				d.setKnown(inv)
				emit(inv)
			}
		}
	}
}

// setKnown remembers the netdevs of the inventory Watch emitted last.
func (d *Discoverer) setKnown(inv Inventory) {
	known := make(map[string]bool, len(inv.Devices))
	for _, dev := range inv.Devices {
		if dev.Netdev != nil {
			known[dev.Netdev.Name] = true
		}
	}
	d.mu.Lock()
	d.known = known
	d.mu.Unlock()
}

// knownNetdev says whether the inventory Watch emitted last has a netdev
// of the name: a link event of it reruns discovery, whatever the link.
func (d *Discoverer) knownNetdev(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.known[name]
}

// numVFs is the content of every PF's sriov_numvfs, as one comparable
// string.
func (d *Discoverer) numVFs() string {
	files, _ := filepath.Glob(d.sysfs.path("bus", "pci", "devices", "*", "sriov_numvfs"))
	s := ""
	for _, f := range files {
		v, _ := readTrimmed(f)
		s += f + "=" + v + ";"
	}
	return s
}

// watchDir calls trigger on every change in dir.
func watchDir(ctx context.Context, dir string, trigger func()) (func(), error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch memif directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("memif directory: %w", err)
	}
	if err := w.Add(dir); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("watch memif directory %s: %w", dir, err)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				trigger()
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				klog.FromContext(ctx).Error(err, "Watching the memif directory", "dir", dir)
				trigger()
			}
		}
	}()
	return func() { _ = w.Close() }, nil
}
