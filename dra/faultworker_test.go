//go:build faultinject

package dra_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/fastpath-dra/fastpath/dataplane/fault"
)

// The fault suites run the daemon's parts in a worker process, one
// operation per process as a daemon's life, and kill it with SIGKILL at a
// fault point: the test binary started again with a job.

// workerEnv carries a worker's job; a test binary started with it set is a
// worker, not a test run.
const workerEnv = "FASTPATH_FAULT_WORKER"

// workers run the kinds of job a worker can get, each from its JSON; each
// fault suite adds its own at init (addWorker).
var workers = map[string]func(data []byte) error{}

// addWorker lets a worker run jobs of kind, decoded into a J.
func addWorker[J interface{ run() error }](kind string) {
	workers[kind] = func(data []byte) error {
		var j J
		if err := json.Unmarshal(data, &j); err != nil {
			return err
		}
		return j.run()
	}
}

// workerJob is what a worker gets: the kind of its job and the job.
type workerJob struct {
	Kind string
	Job  json.RawMessage
}

func TestMain(m *testing.M) {
	if job := os.Getenv(workerEnv); job != "" {
		os.Exit(worker(job))
	}
	os.Exit(m.Run())
}

// worker runs a job; its exit code is 0, or 1 with the error on stderr.
func worker(data string) int {
	var j workerJob
	if err := json.Unmarshal([]byte(data), &j); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	run, ok := workers[j.Kind]
	if !ok {
		fmt.Fprintf(os.Stderr, "no worker for jobs of kind %q\n", j.Kind)
		return 2
	}
	if err := run(j.Job); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// runWorker runs a job of kind in a worker armed to be killed at point
// ("" for none); op names the job in errors; killed reports whether
// SIGKILL ended it.
func runWorker(kind, op string, job any, point string) (killed bool, err error) {
	data, err := json.Marshal(job)
	if err != nil {
		return false, err
	}
	env, err := json.Marshal(workerJob{Kind: kind, Job: data})
	if err != nil {
		return false, err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(env), faultEnv(point))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	runErr := cmd.Run()
	var exit *exec.ExitError
	if errors.As(runErr, &exit) {
		if st, ok := exit.Sys().(syscall.WaitStatus); ok && st.Signaled() && st.Signal() == syscall.SIGKILL {
			return true, nil
		}
		return false, fmt.Errorf("%s: %w: %s", op, runErr, strings.TrimSpace(stderr.String()))
	}
	return false, runErr
}

func faultEnv(point string) string { return fault.Env + "=" + point }
