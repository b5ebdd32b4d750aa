package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/test/vm"
)

// config is a run's.
type config struct {
	cycles int
	seed   uint64
	dir    string
	// unsynced: the store syncs nothing (the churner's -unsynced).
	unsynced bool
}

// diskSize is the size of the store's disk: ext4's journal and the store's
// files fit many times over.
const diskSize = "64M"

// errChurnerExited is the churner's end on its own: before the power
// went, always a failure.
var errChurnerExited = errors.New("the churner exited")

// rebootTimeout bounds a reboot, and the churner's start: TCG on a busy
// machine.
const rebootTimeout = 3 * time.Minute

// plan is what the seed drew for a cycle.
type plan struct {
	// pullPlug: the host kills QEMU; else the churner cuts the power
	// with sysrq b.
	pullPlug bool
	// after is how long after the store opened the power goes.
	after time.Duration
	// format is the checkpoint version the store writes.
	format int
}

func (p plan) String() string {
	how := "sysrq b in the guest"
	if p.pullPlug {
		how = "QEMU killed"
	}
	return fmt.Sprintf("%s %.2f s after the store opened, checkpoint version %d", how, p.after.Seconds(), p.format)
}

// plans draws the cycles' moments from the seed. Of every four cycles the
// second writes version 2 (so that a run of three goes from version 3 to 2
// and back) and the third pulls the plug: make test's three cycles have
// each kind.
func plans(seed uint64, cycles int) []plan {
	rng := rand.New(rand.NewPCG(seed, 0))
	var ps []plan
	for i := range cycles {
		p := plan{pullPlug: i%4 == 2, after: 300*time.Millisecond + time.Duration(rng.Int64N(int64(3700*time.Millisecond))), format: claims.Version}
		if i%4 == 1 {
			p.format = 2
		}
		ps = append(ps, p)
	}
	return ps
}

// cycleResult is how one cycle went.
type cycleResult struct {
	plan
	tried int
	verdict
	// boot is the time from the cut to the guest program serving again;
	// uptime the guest's uptime then (its kernel's boot, firmware left
	// out).
	boot   time.Duration
	uptime float64
	took   time.Duration
	// replaced: the guest kernel stalled (or a boot hung), and QEMU was
	// killed and a new VM booted; the cycle's boot time is left out.
	replaced bool
}

// run boots the VM with a fresh disk and runs the cycles.
func run(ctx context.Context, cfg config) (err error) {
	logger := klog.FromContext(ctx)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("powercut: %d cycles, seed %d (FASTPATH_POWERCUT_SEED=%d replays it)\n", cfg.cycles, cfg.seed, cfg.seed)
	if cfg.dir == "" {
		if cfg.dir, err = os.MkdirTemp("", "fastpath-powercut-"); err != nil {
			return err
		}
		defer func() {
			if err == nil {
				_ = os.RemoveAll(cfg.dir)
			} else {
				fmt.Printf("powercut: the disk image is kept in %s\n", cfg.dir)
			}
		}()
	}
	disk := filepath.Join(cfg.dir, "disk.img")
	_ = os.Remove(disk)
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", disk, diskSize).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %w: %s", disk, err, bytes.TrimSpace(out))
	}
	img, err := vm.Build(ctx, vm.Options{})
	if err != nil {
		return err
	}
	opts := vm.Options{Disk: disk, Reboot: true}
	v, err := vm.Boot(ctx, img, opts)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := v.Shutdown(sctx); err != nil {
			logger.Error(err, "Power the VM off")
		}
	}()
	fmt.Printf("powercut: VM up in %.1f s (%s; %s), console %s\n", v.Booted.Seconds(), v.Accel, v.Ready, v.Console())

	before := map[string]string{}
	var results []cycleResult
	for i, p := range plans(cfg.seed, cfg.cycles) {
		t0 := time.Now()
		fmt.Printf("powercut: cycle %d/%d: %s\n", i+1, cfg.cycles, p)
		r, after, next, err := cycle(ctx, v, img, opts, exe, cfg, i+1, p, before)
		v = next
		if err != nil {
			return fmt.Errorf("cycle %d (%s; FASTPATH_POWERCUT_SEED=%d replays the run, console %s): %w", i+1, p, cfg.seed, v.Console(), err)
		}
		r.took = time.Since(t0)
		fmt.Printf("powercut: cycle %d/%d: %d changes tried, %d acknowledged (%d Prepares and Unprepares of the DRA driver), %d claims checked (%d held the change in flight), boot %.1f s (guest uptime %.1f s), cycle %.1f s\n",
			i+1, cfg.cycles, r.tried, r.acked, r.driver, r.claims, r.inFlight, r.boot.Seconds(), r.uptime, r.took.Seconds())
		if r.replaced {
			fmt.Printf("powercut: cycle %d/%d: the VM was replaced after its kernel stalled; its boot time is left out\n", i+1, cfg.cycles)
		}
		if len(r.problems) > 0 {
			return fmt.Errorf("cycle %d (%s; FASTPATH_POWERCUT_SEED=%d replays the run): acknowledged changes lost or changes never made found:\n  %s",
				i+1, p, cfg.seed, strings.Join(r.problems, "\n  "))
		}
		results = append(results, r)
		before = after
	}
	summarize(results, cfg.seed)
	return nil
}

// cycle runs the churner until the power goes as p says, boots again,
// checks the store, and returns what the cycle found, the claims the store
// holds, and the VM (a new one if QEMU was killed).
func cycle(ctx context.Context, v *vm.VM, img vm.Image, opts vm.Options, exe string, cfg config, n int, p plan, before map[string]string) (cycleResult, map[string]string, *vm.VM, error) {
	r := cycleResult{plan: p}
	reportPath := filepath.Join(v.Share(), fmt.Sprintf("cycle-%d.report", n))
	args := []string{exe, "churn", "-report", reportPath, "-seed", strconv.FormatUint(cfg.seed+uint64(n), 10),
		"-cycle", strconv.Itoa(n), "-format", strconv.Itoa(p.format)}
	if !p.pullPlug {
		args = append(args, "-cut-after", p.after.String())
	}
	if cfg.unsynced {
		args = append(args, "-unsynced")
	}
	var out lockedBuffer
	done := make(chan error, 1)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		code, err := v.Run(runCtx, vm.Command{Args: args}, &out)
		if err == nil {
			err = fmt.Errorf("%w with status %d", errChurnerExited, code)
		}
		done <- err
	}()
	var report []byte
	// stalled replaces a VM whose guest kernel stalled: the kill is the
	// cycle's power cut, as good as the planned one.
	stalled := func(why error) error {
		next, rep, err := replace(ctx, v, img, opts, reportPath, why)
		v, report, r.replaced = next, rep, true
		return err
	}
	if p.pullPlug {
		err := waitStarted(ctx, reportPath, done)
		if err == nil {
			select {
			case <-time.After(p.after):
			case err = <-done:
				err = fmt.Errorf("the churner ended before the power went: %w", err)
			case <-ctx.Done():
				return r, nil, v, ctx.Err()
			}
		}
		switch {
		case errors.Is(err, vm.ErrStalled):
			if err := stalled(err); err != nil {
				return r, nil, v, err
			}
		case err != nil:
			return r, nil, v, fmt.Errorf("%w; the churner's output:\n%s", err, out.String())
		default:
			if err := v.PullPlug(ctx); err != nil {
				return r, nil, v, err
			}
			if err := <-done; errors.Is(err, errChurnerExited) {
				return r, nil, v, fmt.Errorf("the churner ended before the power went (%w):\n%s", err, out.String())
			}
			if report, err = os.ReadFile(reportPath); err != nil {
				return r, nil, v, err
			}
			// A new QEMU, with the disk as the killed one left it.
			next, err := boot(ctx, img, opts)
			if err != nil {
				return r, nil, v, fmt.Errorf("boot after QEMU was killed: %w", err)
			}
			v, r.boot = next, next.Booted
		}
	} else {
		var err error
		select {
		case err = <-done:
		case <-time.After(p.after + rebootTimeout):
			return r, nil, v, fmt.Errorf("the guest did not reboot within %s of the churner's start:\n%s", p.after+rebootTimeout, out.String())
		case <-ctx.Done():
			return r, nil, v, ctx.Err()
		}
		switch {
		case errors.Is(err, vm.ErrStalled):
			if err := stalled(err); err != nil {
				return r, nil, v, err
			}
		case !errors.Is(err, vm.ErrRebooted):
			return r, nil, v, fmt.Errorf("the churner ended before the power went (%w):\n%s", err, out.String())
		default:
			if _, err := v.WaitReboot(ctx, rebootTimeout); err != nil {
				// Nothing of the store's runs before the guest program
				// is up: a boot that hangs is the emulated CPU's.
				if err := stalled(err); err != nil {
					return r, nil, v, err
				}
				break
			}
			ready := time.Now()
			fi, err := os.Stat(reportPath)
			if err != nil {
				return r, nil, v, err
			}
			// The report's last write is the churner's last before the
			// cut (the host's clock).
			r.boot = ready.Sub(fi.ModTime())
			if report, err = os.ReadFile(reportPath); err != nil {
				return r, nil, v, err
			}
		}
	}
	r.uptime = guestUptime(v.Ready)
	rep, err := parseReport(bytes.NewReader(report))
	if err != nil {
		return r, nil, v, err
	}
	if !rep.started && !r.replaced {
		return r, nil, v, fmt.Errorf("the churner did not open the store before the power went:\n%s", out.String())
	}
	after, err := checkStore(ctx, v, exe)
	if errors.Is(err, vm.ErrStalled) {
		if err := stalled(err); err != nil {
			return r, nil, v, err
		}
		after, err = checkStore(ctx, v, exe)
	}
	if err != nil {
		return r, nil, v, err
	}
	r.tried = len(rep.ops)
	r.verdict = verify(before, rep.ops, after)
	return r, after, v, nil
}

// replace kills a VM whose guest kernel stalled (vm.ErrStalled: under TCG
// a vCPU whose timer interrupt was lost, nothing of the store's) or did
// not boot, keeps its console beside the next one's, and boots a new VM on
// the same disk. It returns the report as the killed VM left it.
func replace(ctx context.Context, v *vm.VM, img vm.Image, opts vm.Options, reportPath string, why error) (*vm.VM, []byte, error) {
	fmt.Printf("powercut: %v\npowercut: QEMU killed; a new VM boots on the same disk\n", why)
	if err := v.PullPlug(ctx); err != nil {
		return v, nil, err
	}
	report, err := os.ReadFile(reportPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return v, nil, err
	}
	_ = os.Rename(v.Console(), strings.TrimSuffix(v.Console(), ".log")+".stalled.log")
	next, err := boot(ctx, img, opts)
	if err != nil {
		return v, nil, fmt.Errorf("boot after a stalled VM: %w", err)
	}
	return next, report, nil
}

// boot boots a VM on the disk, and once more if that fails: nothing of the
// store runs before the guest program serves, so a failed boot is QEMU's
// or the emulated CPU's (QEMU 10's TCG has been seen to abort on an
// assertion of its IOMMU emulation early in a boot).
func boot(ctx context.Context, img vm.Image, opts vm.Options) (*vm.VM, error) {
	v, err := vm.Boot(ctx, img, opts)
	if err == nil || ctx.Err() != nil {
		return v, err
	}
	fmt.Printf("powercut: %v\npowercut: booting again\n", err)
	return vm.Boot(ctx, img, opts)
}

// lockedBuffer is the churner's output, written by Run as it comes and read
// by the cycle when the churner failed.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitStarted waits for the churner to report that the store is open.
func waitStarted(ctx context.Context, reportPath string, done <-chan error) error {
	deadline := time.After(rebootTimeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if raw, err := os.ReadFile(reportPath); err == nil && bytes.HasPrefix(raw, []byte("start ")) {
			return nil
		}
		select {
		case <-tick.C:
		case err := <-done:
			return fmt.Errorf("the churner ended before it opened the store: %w", err)
		case <-deadline:
			return fmt.Errorf("the churner did not open the store within %s", rebootTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// checkStore runs `powercut check` in the guest: the store must open as at
// fastpathd's start. It returns each claim's version.
func checkStore(ctx context.Context, v *vm.VM, exe string) (map[string]string, error) {
	var out bytes.Buffer
	code, err := v.Run(ctx, vm.Command{Args: []string{exe, "check"}}, &out)
	if err != nil {
		return nil, err
	}
	if code != 0 {
		return nil, fmt.Errorf("the store after the power cut (exit status %d):\n%s", code, out.String())
	}
	got := map[string]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "claim" {
			got[f[1]] = f[2]
		}
	}
	return got, nil
}

// guestUptime is the guest's uptime in the guest program's readiness
// ("guest uptime 7.12s, ..."), 0 if it says none.
func guestUptime(ready string) float64 {
	s, ok := strings.CutPrefix(ready, "guest uptime ")
	if !ok {
		return 0
	}
	s, _, _ = strings.Cut(s, "s")
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// summarize prints the run's figures.
func summarize(results []cycleResult, seed uint64) {
	var tried, acked, driver, claimsChecked, inFlight, plugs, replaced int
	var boots, uptimes, took []float64
	for _, r := range results {
		tried += r.tried
		acked += r.acked
		driver += r.driver
		claimsChecked += r.claims
		inFlight += r.inFlight
		switch {
		case r.replaced:
			replaced++
			continue
		case r.pullPlug:
			plugs++
		}
		boots = append(boots, r.boot.Seconds())
		uptimes = append(uptimes, r.uptime)
		took = append(took, r.took.Seconds())
	}
	fmt.Printf("\npowercut: %d power cuts (%d sysrq b in the guest, %d QEMU killed as planned, %d killed after the guest kernel stalled), seed %d: %d changes tried, %d acknowledged (%d Prepares and Unprepares of the DRA driver), all present; %d claim records checked, %d held the change in flight\n",
		len(results), len(results)-plugs-replaced, plugs, replaced, seed, tried, acked, driver, claimsChecked, inFlight)
	fmt.Printf("powercut: boot after a cut %s s, guest uptime at ready %s s, cycle %s s (median, min-max)\n",
		spread(boots), spread(uptimes), spread(took))
}

// spread is the median and range of xs.
func spread(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	s := slices.Sorted(slices.Values(xs))
	return fmt.Sprintf("%.1f (%.1f-%.1f)", s[len(s)/2], s[0], s[len(s)-1])
}
