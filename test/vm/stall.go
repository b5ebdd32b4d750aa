package vm

import (
	"bufio"
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
)

// ErrStalled is returned by Run when the guest kernel reported one of its
// CPUs stalled while the command ran. Under TCG a vCPU whose timer
// interrupt is lost sleeps for good: everything that waits on it (a
// process, a kworker, RCU) hangs, and no timeout inside the guest fires.
// The VM is of no further use; the command's outcome says nothing about
// the code it tests.
var ErrStalled = errors.New("the guest kernel stalled")

// stallReport matches the first line of the kernel's RCU CPU stall
// warning: "rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:" or
// "... self-detected stall on CPU". The kernel prints it after a CPU has
// gone 21 s without a quiescent state.
var stallReport = regexp.MustCompile(`rcu: INFO: \S+ (detected stalls on CPUs/tasks|self-detected stall on CPU)`)

// stallLines are the lines of a stall report worth quoting.
const stallLines = 8

// findStall reads the console from offset on and returns the first stall
// report it finds (its first lines, joined), and the offset up to which it
// has looked: the start of a line not yet complete, so that a report the
// guest is still writing is read whole at the next look.
func findStall(console string, offset int64) (report string, next int64) {
	f, err := os.Open(console)
	if err != nil {
		return "", offset
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return "", offset
	}
	r := bufio.NewReader(f)
	var quoted []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			// An incomplete last line is read again next time.
			break
		}
		offset += int64(len(line))
		line = strings.TrimRight(line, "\r\n")
		switch {
		case len(quoted) > 0:
			quoted = append(quoted, strings.TrimSpace(line))
		case stallReport.MatchString(line):
			quoted = append(quoted, strings.TrimSpace(line))
		}
		if len(quoted) == stallLines {
			break
		}
	}
	return strings.Join(quoted, "\n"), offset
}

// ConsoleTail returns the last n lines of the console log at path, for a
// report of a guest that froze without saying why (Result.Frozen): what
// the guest kernel printed last (a hung task's stack, a driver's
// complaint) is all that is left of it once the VM is replaced.
func ConsoleTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(console not readable: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(data), "\r\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, "\r")
	}
	return strings.Join(lines, "\n")
}
