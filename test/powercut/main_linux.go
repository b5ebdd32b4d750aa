package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/test/vm"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx = klog.NewContext(ctx, klog.Background())
	var err error
	args := os.Args[1:]
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "guest":
		err = vm.Guest(ctx)
	case "churn":
		err = churn(ctx, args[1:])
	case "check":
		err = check(args[1:])
	default:
		err = host(ctx, args)
	}
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "powercut: %v\n", err)
		os.Exit(1)
	}
}

// host runs the cycles: the host's side.
func host(ctx context.Context, args []string) error {
	cfg := config{cycles: 5, seed: uint64(time.Now().UnixNano())}
	if s := os.Getenv("FASTPATH_POWERCUT_CYCLES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("FASTPATH_POWERCUT_CYCLES=%q: not a number", s)
		}
		cfg.cycles = n
	}
	if s := os.Getenv("FASTPATH_POWERCUT_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("FASTPATH_POWERCUT_SEED=%q: not a number", s)
		}
		cfg.seed = n
	}
	fs := flag.NewFlagSet("powercut", flag.ContinueOnError)
	fs.IntVar(&cfg.cycles, "cycles", cfg.cycles, "power cuts (default $FASTPATH_POWERCUT_CYCLES, or 5)")
	fs.Uint64Var(&cfg.seed, "seed", cfg.seed, "the seed (default $FASTPATH_POWERCUT_SEED, or the clock)")
	fs.BoolVar(&cfg.unsynced, "unsynced", false, "the store syncs nothing: the run must fail (the test's own test)")
	fs.StringVar(&cfg.dir, "dir", "", "where the disk image goes (default: a new temporary directory, removed unless a cycle fails)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.cycles < 1 {
		return fmt.Errorf("-cycles %d: want 1 or more", cfg.cycles)
	}
	return run(ctx, cfg)
}
