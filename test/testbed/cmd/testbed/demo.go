package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fastpath-dra/fastpath/test/testbed"
)

const (
	demoNamespace = metav1.NamespaceDefault
	demoPod       = "fastpath-demo"
	// demoHealthPort is where the demo's fastpathd serves /healthz.
	demoHealthPort = 36178
)

// demo starts a bed unless one runs, (re)starts fastpathd beside the node,
// runs a pod and shows what it sees. Running it again replaces the daemon and
// the pod.
func demo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fastpathd := fs.String("fastpathd", "bin/fastpathd", "the fastpathd binary to run")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bin, err := filepath.Abs(*fastpathd)
	if err != nil {
		return err
	}
	cfg, err := testbed.Config{}.Defaults()
	if err != nil {
		return err
	}
	running, err := testbed.Running(cfg)
	if err != nil {
		return err
	}
	var bed *testbed.Bed
	if running {
		fmt.Printf("using the running test bed in %s\n", cfg.Dir)
		bed, err = testbed.Attach(cfg)
	} else {
		fmt.Printf("starting a test bed in %s (the first run builds Kubernetes: allow 20 minutes)\n", cfg.Dir)
		bed, err = testbed.Start(ctx, cfg)
	}
	if err != nil {
		return err
	}

	if err := bed.StopProcess("fastpathd"); err != nil {
		return err
	}
	healthAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(demoHealthPort))
	if err := bed.StartProcess(ctx, "fastpathd", bin, "run",
		"--node-name", bed.NodeName(), "--kubeconfig", bed.Kubeconfig(),
		"--plugin-dir", bed.PluginDir("fastpath.dev"), "--registry-dir", bed.RegistryDir(),
		"--nri-socket", bed.NRISocket(), "--state-dir", filepath.Join(cfg.Dir, "fastpath", "state"),
		"--cdi-dir", bed.CDIDir(), "--metrics-addr", healthAddr); err != nil {
		return err
	}
	if err := waitHealthy(ctx, "http://"+healthAddr+"/readyz", cfg.LogFile("fastpathd")); err != nil {
		return err
	}
	fmt.Printf("fastpathd is running beside node %s and registered with its kubelet (log: %s)\n", bed.NodeName(), cfg.LogFile("fastpathd"))

	if err := bed.DeletePod(ctx, demoNamespace, demoPod); err != nil {
		return err
	}
	if _, err := bed.RunPod(ctx, testbed.WorkloadPod(demoNamespace, demoPod, "ifaces")); err != nil {
		return err
	}
	logs, err := bed.WaitPodLog(ctx, demoNamespace, demoPod, "eth0", 30*time.Second)
	if err != nil {
		return err
	}
	fmt.Printf("pod %s/%s is Running; it sees these interfaces:\n%s\n", demoNamespace, demoPod, logs)
	fmt.Println("What to look at next:")
	for _, step := range [][2]string{
		{"export KUBECONFIG=" + bed.Kubeconfig(), ""},
		{"alias kubectl=" + cfg.Kubectl(), "the kubectl of the bed's Kubernetes"},
		{"kubectl get nodes -o wide", "the node, Ready"},
		{"kubectl get pod " + demoPod + " -o wide", "the demo pod"},
		{"kubectl logs " + demoPod, "the interfaces it sees"},
		{"less " + cfg.LogFile("fastpathd"), "the daemon's log"},
		{"make demo", "again: replaces the daemon and the pod"},
		{"make cluster-down", "stop everything and clean up"},
	} {
		if step[1] == "" {
			fmt.Printf("  %s\n", step[0])
			continue
		}
		fmt.Printf("  %-52s # %s\n", step[0], step[1])
	}
	return nil
}

func waitHealthy(ctx context.Context, url, log string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return &testbed.ComponentError{Component: "fastpathd", Log: log, Err: fmt.Errorf("not healthy: %w (last: %w)", err, last)}
	}
	return nil
}
