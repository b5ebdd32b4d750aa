package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A guest console of a VM whose CPU 0 lost its timer under TCG, as it was
// logged (shortened).
const stalledConsole = `fastpath-vm: ready at 6.79s of guest uptime
[   37.194918] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:
[   37.196668] rcu: 	0-...!: (0 ticks this GP) idle=7ab8/0/0x0 softirq=1615/1615 fqs=0 (false positive?)
[   37.197261] rcu: 	(detected by 1, t=5252 jiffies, g=1141, q=495 ncpus=2)
[   37.208850] rcu: rcu_preempt kthread timer wakeup didn't happen for 5251 jiffies! g1141 f0x0 RCU_GP_WAIT_FQS(5) ->state=0x402
[   37.209495] rcu: 	Possible timer handling issue on cpu=0 timer-softirq=399
[   37.209783] rcu: rcu_preempt kthread starved for 5252 jiffies! g1141 f0x0 RCU_GP_WAIT_FQS(5) ->state=0x402 ->cpu=0
[   37.210127] rcu: 	Unless rcu_preempt kthread gets sufficient CPU time, OOM is now expected behavior.
[   37.210412] rcu: RCU grace-period kthread stack dump:
[  100.214722] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:
`

func TestFindStall(t *testing.T) {
	console := filepath.Join(t.TempDir(), "console.log")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(console, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ready := strings.SplitAfter(stalledConsole, "\n")[0]

	write(ready)
	if report, next := findStall(console, 0); report != "" || next != int64(len(ready)) {
		t.Errorf("a console without a stall: report %q, looked up to %d (want %d)", report, next, len(ready))
	}

	// The report's first line is still being written: nothing yet, and it
	// is read whole next time.
	half := ready + "[   37.194918] rcu: INFO: rcu_preempt detected st"
	write(half)
	if report, next := findStall(console, int64(len(ready))); report != "" || next != int64(len(ready)) {
		t.Errorf("half a line: report %q, looked up to %d (want %d)", report, next, len(ready))
	}

	write(stalledConsole)
	report, _ := findStall(console, int64(len(ready)))
	lines := strings.Split(report, "\n")
	if len(lines) != stallLines || !strings.Contains(lines[0], "rcu_preempt detected stalls on CPUs/tasks") ||
		!strings.Contains(report, "Possible timer handling issue on cpu=0") {
		t.Errorf("report:\n%s\nwant the warning's first %d lines, with the CPU whose timer was lost", report, stallLines)
	}

	// A stall reported before the command started is not its own.
	if report, _ := findStall(console, int64(len(stalledConsole))); report != "" {
		t.Errorf("a stall before the offset was reported: %q", report)
	}

	self := "[  12.0] rcu: INFO: rcu_sched self-detected stall on CPU\n"
	write(self)
	if report, _ := findStall(console, 0); report != strings.TrimSpace(self) {
		t.Errorf("a self-detected stall: report %q", report)
	}
	if report, _ := findStall(filepath.Join(t.TempDir(), "none"), 0); report != "" {
		t.Errorf("no console: report %q", report)
	}
}
