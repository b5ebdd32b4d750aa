package vm

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeVM is a VM whose QEMU runs as long as the test: the test plays the
// guest program on its run directory.
func fakeVM(t *testing.T) *VM {
	t.Helper()
	d := runDir(t.TempDir())
	if err := os.MkdirAll(d.queue(), 0o755); err != nil {
		t.Fatal(err)
	}
	return &VM{dir: d, exited: make(chan struct{})}
}

// TestRunRebooted: a command the guest reboots under ends with
// ErrRebooted once the guest program of the next boot is up, not with an
// exit status.
func TestRunRebooted(t *testing.T) {
	v := fakeVM(t)
	go func() {
		// The guest program takes the request, then the guest reboots
		// and the next boot's guest program ends what was cut short.
		deadline := time.Now().Add(10 * time.Second)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for time.Now().Before(deadline) {
			reqs, _ := filepath.Glob(filepath.Join(v.dir.queue(), "*.req"))
			if len(reqs) == 1 {
				_ = os.Rename(reqs[0], strings.TrimSuffix(reqs[0], ".req")+".run")
				endCutShort(v.dir.queue())
				return
			}
			<-tick.C
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	code, err := v.Run(ctx, Command{Args: []string{"churn"}}, io.Discard)
	if !errors.Is(err, ErrRebooted) {
		t.Fatalf("Run = %d, %v; want ErrRebooted", code, err)
	}
	if left, _ := filepath.Glob(filepath.Join(v.dir.queue(), "*")); len(left) > 0 {
		t.Errorf("the queue holds %q after Run", left)
	}
}

// TestWaitReboot: WaitReboot returns the next boot's readiness, not the
// one the VM already had.
func TestWaitReboot(t *testing.T) {
	v := fakeVM(t)
	v.Ready = "guest uptime 7.00s, kernel 6.12, boot a"
	if err := os.WriteFile(v.dir.ready(), []byte(v.Ready+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := v.WaitReboot(t.Context(), 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no new ready") {
		t.Fatalf("WaitReboot with the last boot's readiness: %v, want a timeout", err)
	}
	next := "guest uptime 6.50s, kernel 6.12, boot b"
	go func() { _ = writeAtomic(v.dir.ready(), []byte(next+"\n")) }()
	got, err := v.WaitReboot(t.Context(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got != next || v.Ready != next {
		t.Errorf("WaitReboot = %q (Ready %q), want %q", got, v.Ready, next)
	}
}
