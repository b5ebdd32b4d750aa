// Command testbed starts, stops and inspects the fastpath test bed: a real
// single-node Kubernetes on this machine (see package testbed).
//
//	testbed up                  start a bed (refused while one runs) and print its kubeconfig
//	testbed down                stop it and remove all it created
//	testbed status              say whether it runs, and where its kubeconfig and logs are
//	testbed leftovers           list what of a bed is still on the machine; exit 1 if anything
//	testbed demo -image TAR     start a bed if none runs, install the chart with the fastpathd image
//	                            (make image), and run a pod with a claim on it
//
// FASTPATH_TESTBED_DIR and FASTPATH_CACHE choose the bed's and the builds' directories.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/fastpath-dra/fastpath/test/testbed"
)

func main() {
	klog.InitFlags(nil)
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: testbed [klog flags] up|down|status|leftovers|demo [-image TAR]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx = klog.NewContext(ctx, klog.Background())

	var err error
	switch cmd, args := flag.Arg(0), flag.Args()[1:]; cmd {
	case "up":
		err = up(ctx)
	case "down":
		err = down(ctx)
	case "status":
		err = status()
	case "leftovers":
		err = leftovers()
	case "demo":
		err = demo(ctx, args)
	default:
		fmt.Fprintf(os.Stderr, "testbed: unknown command %q\n", cmd)
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testbed %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
}

func up(ctx context.Context) error {
	start := time.Now()
	bed, err := testbed.Start(ctx, testbed.Config{})
	if err != nil {
		return err
	}
	cfg := bed.Config()
	fmt.Printf("test bed up in %s: node %s Ready\n", time.Since(start).Round(time.Second), cfg.NodeName)
	fmt.Printf("  export KUBECONFIG=%s\n", cfg.Kubeconfig())
	fmt.Printf("  kubectl: %s\n", cfg.Kubectl())
	fmt.Printf("  logs:  %s\n", cfg.LogDir())
	fmt.Printf("  stop:  make cluster-down\n")
	return nil
}

func down(ctx context.Context) error {
	cfg, err := testbed.Config{}.Defaults()
	if err != nil {
		return err
	}
	if err := testbed.Stop(ctx, cfg); err != nil {
		return err
	}
	if left := testbed.Leftovers(cfg); len(left) > 0 {
		return fmt.Errorf("stopped, but these are left: %v", left)
	}
	fmt.Printf("test bed down; logs kept in %s\n", cfg.LogDir())
	return nil
}

func status() error {
	cfg, err := testbed.Config{}.Defaults()
	if err != nil {
		return err
	}
	running, err := testbed.Running(cfg)
	if err != nil {
		return err
	}
	if !running {
		fmt.Printf("no test bed runs in %s\n", cfg.Dir)
		return nil
	}
	fmt.Printf("test bed running in %s\n  export KUBECONFIG=%s\n  logs: %s\n", cfg.Dir, cfg.Kubeconfig(), cfg.LogDir())
	return nil
}

func leftovers() error {
	cfg, err := testbed.Config{}.Defaults()
	if err != nil {
		return err
	}
	left := testbed.Leftovers(cfg)
	for _, l := range left {
		fmt.Println(l)
	}
	if len(left) > 0 {
		return errors.New("test bed leftovers found")
	}
	return nil
}
