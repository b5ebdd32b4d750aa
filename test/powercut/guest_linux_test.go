package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// childEnv makes the test binary the churner (TestMain), for a test to
// kill.
const childEnv = "FASTPATH_POWERCUT_TEST_CHURN"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := churn(context.Background(), os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestChurnKilled runs the cycle of the VM's power cuts on the host, with
// a kill of the churner (SIGKILL) for the cut: the kernel keeps what the
// killed process wrote, so the check must find every acknowledged change,
// in both checkpoint versions, and the report and the check must agree
// about them.
func TestChurnKilled(t *testing.T) {
	dir := t.TempDir()
	before := map[string]string{}
	for cycle, format := range []int{claims.Version, 2, claims.Version} {
		report := filepath.Join(dir, fmt.Sprintf("cycle-%d.report", cycle))
		cmd := exec.Command(os.Args[0], "-dir", filepath.Join(dir, "fs"), "-mount=false", "-report", report,
			"-seed", fmt.Sprint(cycle), "-cycle", fmt.Sprint(cycle), "-format", fmt.Sprint(format))
		cmd.Env = append(os.Environ(), childEnv+"=1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it once it acknowledged some changes, the DRA driver's
		// among them.
		deadline := time.Now().Add(time.Minute)
		tick := time.NewTicker(10 * time.Millisecond)
		for {
			raw, _ := os.ReadFile(report)
			// The driver's worker comes after the churner's three.
			if bytes.Count(raw, []byte("\nack ")) >= 200 && bytes.Contains(raw, []byte("\nack 3 ")) {
				break
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("cycle %d: the churner acknowledged %d changes in a minute:\n%s", cycle, bytes.Count(raw, []byte("\nack ")), out.String())
			}
			<-tick.C
		}
		tick.Stop()
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		raw, err := os.ReadFile(report)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := parseReport(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if !rep.started || rep.format != format {
			t.Fatalf("cycle %d: the report says started %v, format %d; want format %d", cycle, rep.started, rep.format, format)
		}
		after, version, err := readStore(filepath.Join(dir, "fs"))
		if err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		if version != format {
			t.Errorf("cycle %d: the checkpoint is of version %d, want %d", cycle, version, format)
		}
		store, err := claims.Open(checkpointPath(filepath.Join(dir, "fs")), legacy(filepath.Join(dir, "fs")))
		if err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		if _, _, err := newDriver(filepath.Join(dir, "fs"), filepath.Join(dir, "fs"), store); err != nil {
			t.Errorf("cycle %d: %v", cycle, err)
		}
		v := verify(before, rep.ops, after)
		for _, p := range v.problems {
			t.Errorf("cycle %d: %s", cycle, p)
		}
		if v.driver == 0 {
			t.Errorf("cycle %d: no Prepare or Unprepare of the DRA driver acknowledged", cycle)
		}
		if v.acked < 200 || v.claims == 0 {
			t.Errorf("cycle %d: %d changes acknowledged, %d claims checked; want 200 and some", cycle, v.acked, v.claims)
		}
		before = after
	}
}
