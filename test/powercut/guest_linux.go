package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/test/vm"
)

// The guest's side: the store lives on the VM's disk, an ext4 file system
// of its own, mounted at mountPoint, as fastpathd keeps it in its state
// directory.
const mountPoint = "/mnt/powercut"

// mountOptions make ext4 keep nothing the store did not sync: without
// noauto_da_alloc, ext4 writes a file's data before a rename over another
// file or a truncation commits, which would hide a missing fsync; with
// commit=30 the metadata of changes nobody synced waits 30 s in memory
// (not 5), so that a power cut more often finds it there.
const mountOptions = "noauto_da_alloc,commit=30"

// checkpointPath is the store's checkpoint under the mount point, and
// legacy the files of the release before it, as fastpathd run names them
// in its state directory.
func checkpointPath(dir string) string { return filepath.Join(dir, "state", "checkpoint.json") }

func legacy(dir string) claims.Legacy {
	return claims.Legacy{CNI: filepath.Join(dir, "state", "cni", "cni-checkpoint.json")}
}

// mountDisk mounts the VM's disk (vm.DiskSerial) on dir, unless it is.
func mountDisk(dir string) error {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(mounts)) {
		if f := strings.Fields(line); len(f) > 1 && f[1] == dir {
			return nil
		}
	}
	serials, _ := filepath.Glob("/sys/block/*/serial")
	dev := ""
	for _, s := range serials {
		if raw, err := os.ReadFile(s); err == nil && strings.TrimSpace(string(raw)) == vm.DiskSerial {
			dev = "/dev/" + filepath.Base(filepath.Dir(s))
		}
	}
	if dev == "" {
		return fmt.Errorf("no disk with serial %s in /sys/block: not in the VM, or booted without Options.Disk", vm.DiskSerial)
	}
	if out, err := exec.Command("modprobe", "ext4").CombinedOutput(); err != nil {
		return fmt.Errorf("modprobe ext4: %w: %s", err, bytes.TrimSpace(out))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(dev, dir, "ext4", 0, mountOptions); err != nil {
		return fmt.Errorf("mount %s (ext4) on %s: %w", dev, dir, err)
	}
	return nil
}

// churnFlags are the churner's.
type churnFlags struct {
	dir      string
	mount    bool
	report   string
	seed     uint64
	cycle    int
	workers  int
	claims   int
	format   int
	cutAfter time.Duration
	unsynced bool
	driver   bool
}

// churn opens the store as fastpathd does and changes its claims until the
// power goes: workers, each with claims of its own, admit, update and
// delete them one change at a time, as Prepare and Unprepare do, and
// report each change before and after (see report). With cutAfter, it
// cuts the power itself that long after the store opened: sysrq b, which
// reboots at once, without syncing or unmounting anything.
func churn(ctx context.Context, args []string) error {
	var f churnFlags
	fs := flag.NewFlagSet("churn", flag.ContinueOnError)
	fs.StringVar(&f.dir, "dir", mountPoint, "the store's file system")
	fs.BoolVar(&f.mount, "mount", true, "mount the VM's disk on -dir first")
	fs.StringVar(&f.report, "report", "", "the report's file (in the VM's share)")
	fs.Uint64Var(&f.seed, "seed", 1, "the seed of the changes")
	fs.IntVar(&f.cycle, "cycle", 1, "the cycle: versions are named after it")
	fs.IntVar(&f.workers, "workers", 3, "workers changing claims at once")
	fs.IntVar(&f.claims, "claims", 8, "claims per worker")
	fs.IntVar(&f.format, "format", claims.Version, "the checkpoint version to write: 3 (the journal) or 2 (the whole file at each change)")
	fs.DurationVar(&f.cutAfter, "cut-after", 0, "cut the power (sysrq b) this long after the store opened; 0: never (the host pulls the plug)")
	fs.BoolVar(&f.unsynced, "unsynced", false, "the store syncs nothing, which a power cut must show (the test's test)")
	fs.BoolVar(&f.driver, "driver", true, "a worker more prepares and unprepares claims through fastpathd's DRA driver on the store")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if f.report == "" {
		return errors.New("churn: no -report")
	}
	if f.mount {
		if err := mountDisk(f.dir); err != nil {
			return err
		}
	}
	rep, err := os.OpenFile(f.report, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer rep.Close()
	var repMu sync.Mutex
	say := func(format string, a ...any) error {
		repMu.Lock()
		defer repMu.Unlock()
		// One write a line: the share writes through to the host's file
		// before it returns.
		_, err := rep.Write(fmt.Appendf(nil, format+"\n", a...))
		return err
	}

	store, err := claims.Open(checkpointPath(f.dir), legacy(f.dir))
	if err != nil {
		return fmt.Errorf("open the store (fastpathd would not start): %w", err)
	}
	store.SetJournal(f.format == claims.Version)
	if f.unsynced {
		unsynced(store)
	}
	if err := say("start %d", f.format); err != nil {
		return err
	}
	if f.cutAfter > 0 {
		go func() {
			select {
			case <-time.After(f.cutAfter):
			case <-ctx.Done():
				return
			}
			_ = say("cut")
			if err := os.WriteFile("/proc/sysrq-trigger", []byte("b"), 0); err != nil {
				fmt.Fprintf(os.Stderr, "powercut: cut the power: %v\n", err)
			}
		}()
	}
	errs := make(chan error, f.workers+1)
	for w := range f.workers {
		go func() {
			errs <- churnClaims(ctx, store, f, w, say)
		}()
	}
	if f.driver {
		d, vfs, err := newDriver(f.dir, sysfsBase(f.dir, f.mount), store)
		if err != nil {
			return err
		}
		go func() {
			errs <- churnDriver(ctx, d, vfs, f, f.workers, say)
		}()
	}
	// The workers stop at the first error; otherwise the power stops them.
	return <-errs
}

// unsynced makes the store write its files as it does, but sync none: the
// checkpoint written in place, the journal's entries appended. A power cut
// must then lose acknowledged changes, or leave files the store refuses.
func unsynced(store *claims.Store) {
	store.WriteFile = func(path string, data []byte, _ bool) error {
		return claims.WriteFileUnsynced(path, data, 0o600)
	}
	store.Append = func(path string, data []byte, _ bool, at int64) error {
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return err // a missing journal is the store's to make
		}
		defer f.Close()
		if _, err := f.WriteAt(data, at); err != nil {
			return err
		}
		return f.Truncate(at + int64(len(data)))
	}
	store.Sync = func(string) error { return nil }
}

// churnClaims is one worker's changes of its claims, until ctx ends or a
// change fails.
func churnClaims(ctx context.Context, store *claims.Store, f churnFlags, w int, say func(string, ...any) error) error {
	rng := rand.New(rand.NewPCG(f.seed, uint64(w)))
	for n := 0; ctx.Err() == nil; n++ {
		i := rng.IntN(f.claims)
		uid := types.UID(fmt.Sprintf("powercut-%d-%d", w, i))
		key := claims.Key{Driver: claims.DriverFastpath, UID: uid}
		cur, held := store.Get(key)
		version := fmt.Sprintf("%d.%d.%d", f.cycle, w, n)
		rec := record(uid, w, i, version)
		var change func() error
		switch r := rng.IntN(8); {
		case !held && r < 4:
			change = func() error { return store.Admit(rec) }
		case !held:
			// As a CNI claim's Prepare admits: the sync runs beside it.
			change = func() error {
				wait, err := store.AdmitPending(rec)
				if err != nil {
					return err
				}
				return wait()
			}
		case r < 2:
			version = absent
			change = func() error { return store.Delete(key) }
		default:
			// The next step of Prepare, or the claim prepared.
			rec.Prepared = !cur.Prepared
			if !rec.Prepared {
				rec.Steps = []claims.Step{{Name: "vf.settings", State: claims.StepStarted}}
			}
			change = func() error { return store.Put(rec) }
		}
		if err := say("try %d %d %s %s", w, n, key, version); err != nil {
			return err
		}
		if err := change(); err != nil {
			return fmt.Errorf("change %d.%d of claim %s (version %s): %w", w, n, key, version, err)
		}
		if err := say("ack %d %d", w, n); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// record is a claim's record as fastpathd writes one for a pod with twelve
// VFs in netdev mode, about 6 KiB: the journal (compacted once longer than
// 256 KiB and than the checkpoint) is compacted every forty or so changes,
// a few times a cycle. Its Dir names the version.
func record(uid types.UID, w, i int, version string) claims.Claim {
	c := claims.Claim{
		Driver: claims.DriverFastpath, UID: uid, Namespace: "powercut", Name: fmt.Sprintf("claim-%d-%d", w, i),
		Pod:     claims.Pod{UID: types.UID(fmt.Sprintf("pod-%d-%d", w, i)), Name: fmt.Sprintf("pod-%d-%d", w, i)},
		CDISpec: fmt.Sprintf("/var/run/cdi/fastpath.dev-%s.json", uid),
		Dir:     path.Join("/var/lib/fastpath/claims", string(uid), version),
		Steps:   []claims.Step{{Name: "vf.settings", State: claims.StepDone}, {Name: "netdev.moved", State: claims.StepStarted}},
		BootID:  "00000000-0000-4000-8000-000000000000",
	}
	for d := range 12 {
		vf := fmt.Sprintf("0000:%02x:%02x.%d", 2+w, i, d%8)
		c.Devices = append(c.Devices, claims.Device{
			Request: fmt.Sprintf("net%d", d), Pool: "fastpath-vm", Device: fmt.Sprintf("vf-%d-%d-%d", w, i, d), Kind: "vf", Mode: "netdev",
			PCIAddress: vf, PFPCIAddress: "0000:01:00.0", Driver: "igbvf",
			Host:      &claims.HostNetdev{Name: fmt.Sprintf("eth%d", 10+d), MTU: 1500, MAC: "02:00:00:00:00:01"},
			Pod:       &claims.PodInterface{Name: fmt.Sprintf("net%d", d), MTU: 9000, MAC: "02:fa:57:00:00:01", Addresses: []string{"10.44.0.2/24", "fd44::2/64"}, Routes: []claims.Route{{Destination: "10.45.0.0/16", Gateway: "10.44.0.1"}}},
			CDIDevice: fmt.Sprintf("fastpath.dev/vf=%s-%d", uid, d),
		})
	}
	return c
}

// check opens the store as fastpathd does at its start, and prints each
// claim's version (claim KEY VERSION), for the host to check.
func check(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	dir := fs.String("dir", mountPoint, "the store's file system")
	mount := fs.Bool("mount", true, "mount the VM's disk on -dir first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *mount {
		if err := mountDisk(*dir); err != nil {
			return err
		}
	}
	got, version, err := readStore(*dir)
	if err != nil {
		return err
	}
	// The daemon starts on the store the driver prepared claims in.
	store, err := claims.Open(checkpointPath(*dir), legacy(*dir))
	if err != nil {
		return fmt.Errorf("open the store (fastpathd would not start): %w", err)
	}
	if _, _, err := newDriver(*dir, sysfsBase(*dir, *mount), store); err != nil {
		return err
	}
	fmt.Printf("store version %d, %d claims\n", version, len(got))
	for _, k := range slices.Sorted(maps.Keys(got)) {
		fmt.Printf("claim %s %s\n", k, got[k])
	}
	return nil
}

// recordVersion is the version a record holds: the churner's names it in
// its Dir; the driver's claims are prepared or not.
func recordVersion(c *claims.Claim) string {
	switch {
	case c.Namespace != driverNamespace:
		return path.Base(c.Dir)
	case c.Prepared:
		return versionPrepared
	default:
		return versionPreparing
	}
}

// readStore opens the store under dir as fastpathd does at its start, and
// returns each claim's version and the checkpoint's. The store's reader
// (claims.Read, what an inspection of the node sees) must find the same
// records.
func readStore(dir string) (map[string]string, int, error) {
	cp := checkpointPath(dir)
	store, err := claims.Open(cp, legacy(dir))
	if err != nil {
		return nil, 0, fmt.Errorf("open the store (fastpathd would not start): %w", err)
	}
	read, version, err := claims.Read(cp)
	if err != nil {
		return nil, 0, fmt.Errorf("read the store (claims.Read): %w", err)
	}
	got := map[string]string{}
	for _, c := range store.Claims() {
		got[c.Key().String()] = recordVersion(&c)
	}
	if len(read) != len(got) {
		return nil, 0, fmt.Errorf("the store opened holds %d claims, claims.Read %d", len(got), len(read))
	}
	for k, c := range read {
		if got[k.String()] != recordVersion(c) {
			return nil, 0, fmt.Errorf("claim %s: the store opened holds version %s, claims.Read version %s", k, got[k.String()], recordVersion(c))
		}
	}
	return got, version, nil
}
