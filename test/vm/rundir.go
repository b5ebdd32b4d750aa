package vm

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// runDir holds a VM's run-time files: its pidfile and console log, the
// FIFOs of its wake port and the directory it shares read-write with the
// guest, where commands and their output pass.
type runDir string

func (d runDir) lockFile() string { return filepath.Join(string(d), "lock") }
func (d runDir) pidfile() string  { return filepath.Join(string(d), "qemu.pid") }
func (d runDir) console() string  { return filepath.Join(string(d), "console.log") }
func (d runDir) qemuLog() string  { return filepath.Join(string(d), "qemu.log") }

// wake is the base name of the wake port's FIFOs (QEMU's pipe chardev
// opens wake.in and wake.out).
func (d runDir) wake() string  { return filepath.Join(string(d), "wake") }
func (d runDir) share() string { return filepath.Join(string(d), "share") }

// ready is written by the guest program once it serves commands.
func (d runDir) ready() string { return filepath.Join(d.share(), "ready") }

// queue holds the commands, their output and exit codes, and the poweroff
// request.
func (d runDir) queue() string { return filepath.Join(d.share(), "q") }

// rebootedExit is the exit status the guest program gives a command a
// reboot cut short (ErrRebooted).
const rebootedExit = "rebooted"

// tail returns the last n lines of a log file.
func tail(path string, n int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, strings.TrimRight(sc.Text(), "\r"))
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines
}

// lastStep is the last step stage 1 or the guest program logged on the console,
// or its failure.
func lastStep(console string) string {
	step := "the kernel starting (nothing from the initramfs on the console yet)"
	for _, l := range tail(console, 10000) {
		if i := strings.Index(l, "fastpath-vm: "); i >= 0 {
			if s, ok := strings.CutPrefix(l[i:], "fastpath-vm: step: "); ok {
				step = s
			} else if s, ok := strings.CutPrefix(l[i:], "fastpath-vm: FAILED: "); ok {
				return step + " (failed: " + s + ")"
			}
		}
	}
	return step
}
