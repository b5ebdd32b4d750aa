package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/test/vm"
)

func usage() {
	fmt.Fprintln(os.Stderr, `usage: fastpath-vm build | boot | run [-C DIR] CMD [ARG...] | down | status | test [flags] PKG...`)
}

func main() {
	klog.InitFlags(nil)
	flag.Usage = usage
	flag.Parse()
	if flag.NArg() < 1 {
		usage()
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx = klog.NewContext(ctx, klog.Background())

	cmd, args := flag.Arg(0), flag.Args()[1:]
	var err error
	code := 0
	switch cmd {
	case "build":
		err = build(ctx)
	case "boot":
		err = boot(ctx)
	case "run":
		code, err = run(ctx, args)
	case "down":
		err = down(ctx)
	case "status":
		err = status()
	case "test":
		code, err = test(ctx, args)
	case "guest":
		err = vm.Guest(ctx)
	default:
		fmt.Fprintf(os.Stderr, "fastpath-vm: unknown command %q\n", cmd)
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fastpath-vm %s: %v\n", cmd, err)
		if code == 0 {
			code = 1
		}
	}
	cancel()
	os.Exit(code)
}

func build(ctx context.Context) error {
	t0 := time.Now()
	img, err := vm.Build(ctx, vm.Options{})
	if err != nil {
		return err
	}
	fmt.Printf("image ready in %.1f s: kernel %s, initramfs %s\n", time.Since(t0).Seconds(), img.Release, img.Initramfs)
	return nil
}

func boot(ctx context.Context) error {
	img, err := vm.Build(ctx, vm.Options{})
	if err != nil {
		return err
	}
	v, err := vm.Boot(ctx, img, vm.Options{Detach: true})
	if err != nil {
		return err
	}
	fmt.Printf("VM up in %.1f s (%s; %s), qemu pid %d, console %s\n", v.Booted.Seconds(), v.Accel, v.Ready, v.PID(), v.Console())
	return nil
}

func run(ctx context.Context, args []string) (int, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	dir := fs.String("C", "", "working directory in the guest (default: this one)")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if fs.NArg() == 0 {
		return 2, errors.New("no command")
	}
	if *dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return 0, err
		}
		*dir = wd
	}
	v, err := vm.Running(vm.Options{})
	if err != nil {
		return 0, fmt.Errorf("%w (fastpath-vm boot starts one)", err)
	}
	return v.Run(ctx, vm.Command{Args: fs.Args(), Dir: *dir}, os.Stdout)
}

func down(ctx context.Context) error {
	v, err := vm.Running(vm.Options{})
	if errors.Is(err, vm.ErrNotRunning) {
		fmt.Println("no VM runs")
		return nil
	}
	if err != nil {
		return err
	}
	if err := v.Shutdown(ctx); err != nil {
		return err
	}
	fmt.Printf("VM down (qemu pid %d)\n", v.PID())
	return nil
}

func status() error {
	v, err := vm.Running(vm.Options{})
	if errors.Is(err, vm.ErrNotRunning) {
		fmt.Println("no VM runs")
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Printf("a VM runs: qemu pid %d, %s, console %s\n", v.PID(), v.Ready, v.Console())
	return nil
}

// test builds the packages' test binaries, boots a VM, runs them in it one
// after another and powers the VM off, whatever happened.
func test(ctx context.Context, args []string) (int, error) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	// faultinject builds the fault points into the test binaries (they do
	// nothing unless a test arms them), for the fault suite's kills on real
	// VFs; fastpathd itself is built without it.
	tags := fs.String("tags", "sriov,faultinject", "build tags of the test binaries")
	out := fs.String("o", "bin/sriov", "where the test binaries go")
	runRE := fs.String("run", "^TestSRIOV", "the tests to run (go test -run)")
	benchRE := fs.String("bench", "^BenchmarkSRIOV", "the benchmarks to run (go test -bench)")
	benchtime := fs.String("benchtime", "20x", "go test -benchtime")
	count := fs.Int("count", 1, "go test -count")
	timeout := fs.Duration("timeout", 10*time.Minute, "per test binary (go test -timeout)")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if fs.NArg() == 0 {
		return 2, errors.New("no packages")
	}
	outDir, err := filepath.Abs(*out)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	suites, err := vm.BuildSuites(ctx, *tags, outDir, fs.Args()...)
	if err != nil {
		return 0, err
	}
	tBuild := time.Since(t0)

	t0 = time.Now()
	img, err := vm.Build(ctx, vm.Options{})
	if err != nil {
		return 0, err
	}
	tImage := time.Since(t0)
	g := &guest{img: img}
	if err := g.boot(ctx); err != nil {
		return 0, err
	}
	// Whatever happens below, the VM goes down.
	defer func() { _ = g.shutdown(ctx, time.Minute) }()

	testArgs := []string{"-test.v", "-test.count=" + strconv.Itoa(*count), "-test.run", *runRE, "-test.bench", *benchRE,
		"-test.benchtime", *benchtime, "-test.timeout", timeout.String()}
	// The test binary's own timeout panics with every goroutine's stack;
	// this one, a little later, is for a guest that no longer runs it.
	suiteTimeout := *timeout + 2*time.Minute
	var results []vm.Result
	rebooted := false
	for i, s := range suites {
		fmt.Printf("=== fastpath-vm: %s in the VM (%s)\n", s.Package, s.Binary)
		r := g.run(ctx, s, testArgs, suiteTimeout)
		if (errors.Is(r.Err, vm.ErrStalled) || r.Frozen() || errors.Is(r.Err, vm.ErrCrashed) || errors.Is(r.Err, vm.ErrReset)) && !rebooted && ctx.Err() == nil {
			// A lost timer interrupt of the emulated CPU (reported
			// by the kernel as a stall, or not: a guest that froze),
			// the emulator aborting, or the emulated machine
			// resetting, not the code under test: the suite runs
			// again, once, in a new VM. Again, it fails.
			rebooted = true
			why := "the guest kernel stalled"
			switch {
			case r.Frozen():
				why = "the guest froze (the test binary neither ended nor reported its own timeout)"
				fmt.Printf("fastpath-vm: the last lines of the guest's console:\n%s\n", vm.ConsoleTail(g.v.Console(), 40))
			case errors.Is(r.Err, vm.ErrCrashed):
				why = "QEMU crashed"
			case errors.Is(r.Err, vm.ErrReset):
				why = "the guest reset"
			}
			fmt.Printf("fastpath-vm: %v\nfastpath-vm: %s; %s runs again in a new VM\n", r.Err, why, s.Package)
			kept, err := g.replace(ctx)
			if err != nil {
				return 0, fmt.Errorf("replace the VM after %s: %w", why, err)
			}
			fmt.Printf("=== fastpath-vm: %s in a new VM (the old one's console: %s)\n", s.Package, kept)
			r = g.run(ctx, s, testArgs, suiteTimeout)
			r.Note = "run again in a new VM after " + why
		}
		results = append(results, r)
		if (errors.Is(r.Err, vm.ErrStalled) || errors.Is(r.Err, vm.ErrStillRuns) || errors.Is(r.Err, vm.ErrCrashed) || errors.Is(r.Err, vm.ErrReset)) && i+1 < len(suites) {
			// A stalled guest, or one that cannot end a test binary: the
			// VM cannot be trusted with the rest.
			for _, rest := range suites[i+1:] {
				results = append(results, vm.Result{Suite: rest, Err: errors.New("not run: the VM was stopped before it")})
			}
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	t0 = time.Now()
	grace := time.Minute
	if len(results) > 0 && results[len(results)-1].Err != nil {
		grace = 5 * time.Second
	}
	if err := g.shutdown(ctx, grace); err != nil {
		return 0, err
	}
	if !summary(results, tBuild, tImage, g.booted, time.Since(t0)) {
		return 1, nil
	}
	return 0, ctx.Err()
}

// guest is the VM the suites run in, replaced when its kernel stalls.
type guest struct {
	img vm.Image
	v   *vm.VM
	// booted is how long the boots took, together.
	booted time.Duration
}

func (g *guest) boot(ctx context.Context) error {
	v, err := vm.Boot(ctx, g.img, vm.Options{})
	if err != nil {
		return err
	}
	g.v = v
	g.booted += v.Booted
	fmt.Printf("fastpath-vm: VM up in %.1f s (%s; %s), qemu pid %d, console %s\n", v.Booted.Seconds(), v.Accel, v.Ready, v.PID(), v.Console())
	return nil
}

// run runs one suite, bounded by timeout.
func (g *guest) run(ctx context.Context, s vm.Suite, args []string, timeout time.Duration) vm.Result {
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("the test binary did not end within %s", timeout))
	defer cancel()
	r := g.v.RunSuite(ctx, s, args, os.Stdout)
	if r.Err != nil && ctx.Err() != nil {
		r.Err = fmt.Errorf("%w (%w)", r.Err, context.Cause(ctx))
	}
	return r
}

// shutdown powers the VM off, or kills it when it is not off within
// grace; a VM already down is left be. The guest program takes the
// poweroff only between commands: a VM whose command hangs is killed.
func (g *guest) shutdown(ctx context.Context, grace time.Duration) error {
	if g.v == nil {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	err := g.v.Shutdown(sctx)
	g.v = nil
	return err
}

// replace stops the VM, keeps its console log beside the new one and boots
// a new VM. It returns where the old console went.
func (g *guest) replace(ctx context.Context) (string, error) {
	console, qlog := g.v.Console(), g.v.QEMULog()
	if err := g.shutdown(ctx, 5*time.Second); err != nil {
		return "", err
	}
	kept := strings.TrimSuffix(console, ".log") + ".replaced.log"
	if err := os.Rename(console, kept); err != nil {
		return "", err
	}
	// QEMU's own log too: Boot makes a new one.
	_ = os.Rename(qlog, strings.TrimSuffix(qlog, ".log")+".replaced.log")
	return kept, g.boot(ctx)
}

// summary prints how each suite went and the totals, and reports whether
// all went well.
func summary(results []vm.Result, tBuild, tImage, tBoot, tDown time.Duration) bool {
	fmt.Printf("\nfastpath-vm: test binaries built in %.1f s, image in %.1f s, VM booted in %.1f s, powered off in %.1f s\n",
		tBuild.Seconds(), tImage.Seconds(), tBoot.Seconds(), tDown.Seconds())
	var passed, failed int
	for _, r := range results {
		verdict := "ok"
		if !r.OK() {
			verdict = "FAIL"
		}
		fmt.Printf("%-4s %-40s %6.1f s  %d passed", verdict, r.Package, r.Took.Seconds(), len(r.Passed))
		if len(r.Failed) > 0 {
			fmt.Printf(", failed: %s", strings.Join(r.Failed, " "))
		}
		if len(r.Skipped) > 0 {
			fmt.Printf(", skipped (not allowed in the VM): %s", strings.Join(r.Skipped, " "))
		}
		if r.Note != "" {
			fmt.Printf(" (%s)", r.Note)
		}
		switch {
		case r.Err != nil:
			fmt.Printf(", did not finish: %v", r.Err)
		case r.Exit != 0:
			fmt.Printf(", exit status %d", r.Exit)
		case len(r.Passed) == 0:
			fmt.Print(", ran nothing")
		}
		fmt.Println()
		passed += len(r.Passed)
		failed += len(r.Failed) + len(r.Skipped)
		if !r.OK() && len(r.Failed)+len(r.Skipped) == 0 {
			failed++
		}
	}
	fmt.Printf("e2e-sriov: %d passed, %d failed\n", passed, failed)
	return failed == 0
}
