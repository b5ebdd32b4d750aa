package testbed

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one component the bed started. PID and start time together
// identify it, so a recycled PID is never signalled.
type process struct {
	Name      string `json:"name"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
	Log       string `json:"log"`
	// Argv and Env (beyond this process's environment) start it again.
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
}

// ComponentError says which component failed and where its log is.
type ComponentError struct {
	Component string
	Log       string
	Err       error
}

func (e *ComponentError) Error() string {
	msg := fmt.Sprintf("%s: %v", e.Component, e.Err)
	if e.Log != "" {
		msg += fmt.Sprintf(" (log: %s)", e.Log)
		if tail := logTail(e.Log, 15); tail != "" {
			msg += "\n--- last lines of " + e.Log + " ---\n" + tail
		}
	}
	return msg
}

func (e *ComponentError) Unwrap() error { return e.Err }

// startProcess starts argv in its own session with output to logPath. The
// caller's process reaps it (so it never lingers as a zombie of ours).
func startProcess(name, logPath string, env []string, argv ...string) (process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return process{}, &ComponentError{Component: name, Err: err}
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(componentEnviron(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	inheritedOnce.Do(closeInheritedOnExec)
	if err := cmd.Start(); err != nil {
		return process{}, &ComponentError{Component: name, Log: logPath, Err: fmt.Errorf("start %s: %w", argv[0], err)}
	}
	go func() { _ = cmd.Wait() }()
	st, err := procStartTime(cmd.Process.Pid)
	if err != nil {
		return process{}, &ComponentError{Component: name, Log: logPath, Err: err}
	}
	return process{Name: name, PID: cmd.Process.Pid, StartTime: st, Log: logPath, Argv: argv, Env: env}, nil
}

// componentEnviron is the caller's environment without TMPDIR: a
// component outlives the process that started it (the e2e suite restarts
// containerd and the kubelet, and points TMPDIR at a directory it removes
// when it ends, where runc would then fail to write an exec's process file).
func componentEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TMPDIR=") {
			out = append(out, kv)
		}
	}
	return out
}

var inheritedOnce sync.Once

// closeInheritedOnExec marks the descriptors this process inherited (Go
// opens its own close-on-exec) to be closed in the components: a lock a
// caller such as flock(1) holds for the run must not outlive the run in
// a component that stays up.
func closeInheritedOnExec() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// alive reports whether the process is still running (a zombie is not).
func (p process) alive() bool {
	st, state, err := procStat(p.PID)
	return err == nil && st == p.StartTime && state != 'Z' && state != 'X'
}

// stop sends SIGTERM, waits up to grace for the process to end, then SIGKILL.
func (p process) stop(grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s (pid %d): %w", p.Name, p.PID, err)
	}
	if waitGone(p.alive, grace) {
		return nil
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s (pid %d): %w", p.Name, p.PID, err)
	}
	if !waitGone(p.alive, 10*time.Second) {
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.Name, p.PID)
	}
	return nil
}

// kill sends SIGKILL, as a crash would, and waits for the process to end.
func (p process) kill() error {
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s (pid %d): %w", p.Name, p.PID, err)
	}
	if !waitGone(p.alive, 10*time.Second) {
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.Name, p.PID)
	}
	return nil
}

// waitGone polls alive until it is false or the deadline passes.
func waitGone(alive func() bool, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

func procStartTime(pid int) (uint64, error) {
	st, _, err := procStat(pid)
	return st, err
}

// procStat returns the start time (field 22) and state (field 3) of pid.
func procStat(pid int) (uint64, byte, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	st, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat: %w", pid, err)
	}
	return st, fields[0][0], nil
}

// processesMatching lists live processes whose command line contains s.
func processesMatching(s string) []process {
	entries, _ := os.ReadDir("/proc")
	var out []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, []byte(s)) {
			continue
		}
		st, state, err := procStat(pid)
		if err != nil || state == 'Z' {
			continue
		}
		args := strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
		out = append(out, process{Name: args, PID: pid, StartTime: st})
	}
	return out
}

func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
