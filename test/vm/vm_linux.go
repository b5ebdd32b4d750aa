package vm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// Options say where the VM's files are and what it gets. A zero field
// takes its default.
type Options struct {
	// CacheDir holds test/deps.sh's builds; the VM keeps its own files in
	// CacheDir/vm. Default $FASTPATH_CACHE, or ~/.cache/fastpath.
	CacheDir string
	// KernelDir and Busybox are what `test/deps.sh vm` unpacked: a
	// linux-image package and the busybox binary. Default
	// $FASTPATH_VM_KERNEL and $FASTPATH_VM_BUSYBOX.
	KernelDir, Busybox string
	// Memory and CPUs of the guest. Default 2G and 2.
	Memory string
	CPUs   int
	// Accel is kvm, tcg or auto (the default, or $FASTPATH_VM_ACCEL).
	Accel string
	// BootTimeout bounds the boot, from QEMU's start to the guest program
	// serving. Default 3m (TCG on a busy machine).
	BootTimeout time.Duration
	// GuestProgram is the program the guest runs, with the argument
	// "guest" (see Guest). Default: the running program.
	GuestProgram string
	// Detach lets QEMU outlive this process, for a VM booted now and used
	// by later commands. Otherwise QEMU is killed when this process ends,
	// however it ends.
	Detach bool
	// Disk is a raw disk image the guest gets as a virtio disk whose
	// serial is DiskSerial (/dev/vda: the guest's only disk), for a file
	// system of its own. Unset: no disk.
	Disk string
	// Reboot keeps QEMU running when the guest reboots: the guest boots
	// again in it, and a command the reboot cut short ends with
	// ErrRebooted. By default QEMU exits when the guest reboots (or
	// panics).
	Reboot bool
}

// ErrRunning is returned by Boot while a VM runs.
var ErrRunning = errors.New("a fastpath VM is already running")

// ErrNotRunning is returned when there is no VM to use.
var ErrNotRunning = errors.New("no fastpath VM is running")

// ErrStillRuns is returned by Run for a command the guest did not end
// when asked to: the VM is busy with it for good.
var ErrStillRuns = errors.New("still runs in the guest")

// ErrCrashed is the VM's end when QEMU itself was killed by a signal (an
// assertion of an emulated device aborting it, say): the emulator's fault,
// which says nothing of the code under test unless it comes again.
var ErrCrashed = errors.New("QEMU crashed")

// ErrReset is the VM's end when QEMU exited on its own, with no error,
// while the guest ran a command, and the guest's console says no kernel
// panic: the emulated machine reset (a triple fault of the emulated CPU),
// the emulator's fault as a crash is, unless it comes again.
var ErrReset = errors.New("the guest reset without a word")

// ErrRebooted is returned by Run for a command the guest rebooted under
// (Options.Reboot): it ended with the boot, whatever it was doing.
var ErrRebooted = errors.New("the guest rebooted under it")

func (o *Options) defaults() error {
	if o.CacheDir == "" {
		o.CacheDir = os.Getenv("FASTPATH_CACHE")
	}
	if o.CacheDir == "" {
		home, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("cache directory: %w", err)
		}
		o.CacheDir = filepath.Join(home, "fastpath")
	}
	if o.KernelDir == "" {
		o.KernelDir = os.Getenv("FASTPATH_VM_KERNEL")
	}
	if o.Busybox == "" {
		o.Busybox = os.Getenv("FASTPATH_VM_BUSYBOX")
	}
	if o.Memory == "" {
		o.Memory = "2G"
	}
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	if o.Accel == "" {
		o.Accel = os.Getenv("FASTPATH_VM_ACCEL")
	}
	if o.BootTimeout == 0 {
		o.BootTimeout = 3 * time.Minute
	}
	return nil
}

func (o Options) dir() string    { return filepath.Join(o.CacheDir, "vm") }
func (o Options) run() runDir    { return runDir(filepath.Join(o.dir(), "run")) }
func (o Options) images() string { return filepath.Join(o.dir(), "images") }

// Build builds (or finds) the VM's image. The kernel and busybox must have
// been unpacked by `test/deps.sh vm`.
func Build(ctx context.Context, o Options) (Image, error) {
	if err := o.defaults(); err != nil {
		return Image{}, err
	}
	if o.KernelDir == "" || o.Busybox == "" {
		return Image{}, errors.New("no kernel or busybox for the VM: run `test/deps.sh vm` and set FASTPATH_VM_KERNEL and FASTPATH_VM_BUSYBOX as `test/deps.sh env` prints them")
	}
	return BuildImage(ctx, o.KernelDir, o.Busybox, o.images())
}

// VM is a running VM.
type VM struct {
	dir runDir
	pid int
	// exited is closed when QEMU has exited.
	exited chan struct{}
	// exitErr is how a QEMU this process started ended.
	exitErr error
	// Accel says how the guest's CPUs run, and why.
	Accel string
	// Booted is how long QEMU took from its start to the guest program
	// serving.
	Booted time.Duration
	// Ready is what the guest program reported: guest uptime and kernel release.
	Ready string
}

// PID is QEMU's process ID.
func (v *VM) PID() int { return v.pid }

// Share is the directory the guest shares read-write with the host, at
// the same path in both: what the guest writes there, the host reads at
// once, and a power cut of the guest does not lose it (9p writes through to
// the host's file). It is emptied at each Boot.
func (v *VM) Share() string { return v.dir.share() }

// Console is the path of the guest's console log.
func (v *VM) Console() string { return v.dir.console() }

// QEMULog is the path of QEMU's own log (its standard output and error).
func (v *VM) QEMULog() string { return v.dir.qemuLog() }

// Boot starts a VM from img and waits until its guest program serves
// commands. It is refused while a VM runs. If the boot fails, QEMU is
// stopped and the error says which step failed, with the console's last
// lines.
func Boot(ctx context.Context, img Image, o Options) (_ *VM, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	d := o.run()
	if err := os.MkdirAll(string(d), 0o755); err != nil {
		return nil, err
	}
	unlock, err := lock(d)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if pid, ok := running(d); ok {
		return nil, fmt.Errorf("%w (qemu pid %d, console %s): stop it first (fastpath-vm down)", ErrRunning, pid, d.console())
	}
	guest, err := installGuestProgram(o)
	if err != nil {
		return nil, err
	}
	if err := resetRunDir(d); err != nil {
		return nil, err
	}
	a, err := pickAccel(o.Accel)
	if err != nil {
		return nil, err
	}
	qlog, err := os.Create(d.qemuLog())
	if err != nil {
		return nil, err
	}
	defer qlog.Close()
	cmd := exec.Command("qemu-system-x86_64", qemuArgs(img, o, d, a, guest)...)
	cmd.Stdout, cmd.Stderr = qlog, qlog
	if o.Detach {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	} else {
		// Its own process group, so that ^C reaches this process, which
		// powers the guest off; the parent-death signal covers the rest.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	v := &VM{dir: d, exited: make(chan struct{}), Accel: a.name + " (" + a.why + ")"}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal follows the thread that started QEMU:
		// keep this one until QEMU ends.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		v.exitErr = cmd.Wait()
		close(v.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start qemu-system-x86_64 (test/deps.sh vm installs it): %w", err)
	}
	t0 := time.Now()
	v.pid = cmd.Process.Pid
	defer func() {
		if err != nil {
			v.kill(context.WithoutCancel(ctx))
		}
	}()
	if err := os.WriteFile(d.pidfile(), []byte(strconv.Itoa(v.pid)+"\n"), 0o644); err != nil {
		return nil, err
	}
	klog.FromContext(ctx).Info("Booting the VM", "accel", v.Accel, "kernel", img.Release, "qemuPID", v.pid, "console", d.console())

	ready, err := v.waitFile(ctx, d.ready(), o.BootTimeout)
	if err != nil {
		return nil, v.bootError(err, time.Since(t0))
	}
	v.Booted, v.Ready = time.Since(t0), strings.TrimSpace(string(ready))
	return v, nil
}

// bootError says why and where a boot failed, with the end of the console
// and of QEMU's own log.
func (v *VM) bootError(cause error, after time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "the VM did not boot: %v, %.1f s after QEMU started, at step: %s\n", cause, after.Seconds(), lastStep(v.dir.console()))
	fmt.Fprintf(&b, "last lines of the console (%s):\n", v.dir.console())
	for _, l := range tail(v.dir.console(), 30) {
		fmt.Fprintf(&b, "  | %s\n", l)
	}
	if q := tail(v.dir.qemuLog(), 10); len(q) > 0 {
		fmt.Fprintf(&b, "QEMU's log (%s):\n", v.dir.qemuLog())
		for _, l := range q {
			fmt.Fprintf(&b, "  | %s\n", l)
		}
	}
	return errors.New(strings.TrimRight(b.String(), "\n"))
}

// Running returns the VM that runs now, booted by this or another process.
func Running(o Options) (*VM, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	d := o.run()
	pid, ok := running(d)
	if !ok {
		return nil, ErrNotRunning
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("watch qemu pid %d: %w", pid, err)
	}
	v := &VM{dir: d, pid: pid, exited: make(chan struct{})}
	go func() {
		defer func() { _ = unix.Close(fd) }()
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
				close(v.exited)
				return
			}
		}
	}()
	ready, _ := os.ReadFile(d.ready())
	v.Ready = strings.TrimSpace(string(ready))
	return v, nil
}

// running returns the PID in the pidfile if it is this rig's QEMU, alive.
func running(d runDir) (int, bool) {
	raw, err := os.ReadFile(d.pidfile())
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, ours(d, pid)
}

// ours reports whether pid is a QEMU this rig started for run directory d:
// its name and its console file say so.
func ours(d runDir, pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != processName {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(cmdline, []byte("file:"+d.console()+"\x00"))
}

// lock serialises boots and shutdowns of the VM.
func lock(d runDir) (func(), error) {
	f, err := os.OpenFile(d.lockFile(), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: another fastpath-vm is booting or stopping it (lock %s)", ErrRunning, d.lockFile())
		}
		return nil, fmt.Errorf("lock %s: %w", d.lockFile(), err)
	}
	return func() { _ = f.Close() }, nil
}

// installGuestProgram copies the guest program into the cache under a name
// made of its content: the guest runs it from there, and a rebuild of the
// program while a VM runs does not pull it from under the guest.
func installGuestProgram(o Options) (string, error) {
	src := o.GuestProgram
	if src == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("find the guest program: %w", err)
		}
		src = exe
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("read the guest program: %w", err)
	}
	sum := sha256.Sum256(data)
	dst := filepath.Join(o.dir(), "guest", "fastpath-vm-"+hex.EncodeToString(sum[:])[:12])
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(dst+".tmp", data, 0o755); err != nil {
		return "", err
	}
	return dst, os.Rename(dst+".tmp", dst)
}

// resetRunDir clears what an earlier VM left: share, queue, FIFOs, logs.
func resetRunDir(d runDir) error {
	if err := os.RemoveAll(d.share()); err != nil {
		return err
	}
	if err := os.MkdirAll(d.queue(), 0o755); err != nil {
		return err
	}
	for _, f := range []string{d.wake() + ".in", d.wake() + ".out"} {
		_ = os.Remove(f)
		if err := unix.Mkfifo(f, 0o600); err != nil {
			return fmt.Errorf("make FIFO %s: %w", f, err)
		}
	}
	return os.WriteFile(d.console(), nil, 0o644)
}

// waitFile waits for path to exist and returns its content. It fails when
// QEMU exits, ctx ends or timeout passes.
func (v *VM) waitFile(ctx context.Context, path string, timeout time.Duration) ([]byte, error) {
	return v.waitContent(ctx, path, timeout, nil)
}

// waitContent is waitFile, for a content that want accepts (nil: any).
func (v *VM) waitContent(ctx context.Context, path string, timeout time.Duration, want func([]byte) bool) ([]byte, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(filepath.Dir(path)); err != nil {
		return nil, err
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	// A safety net for events lost on the way through 9p.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if data, err := os.ReadFile(path); err == nil && (want == nil || want(data)) {
			return data, nil
		}
		select {
		case <-w.Events:
		case <-tick.C:
		case <-v.exited:
			return nil, v.exitReason()
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			if want != nil {
				return nil, fmt.Errorf("no new %s after %s", filepath.Base(path), timeout)
			}
			return nil, fmt.Errorf("no %s after %s", filepath.Base(path), timeout)
		}
	}
}

func (v *VM) exitReason() error {
	// QEMU says why it aborted (a failed assertion, a device error) on
	// its own log, not the guest's console.
	var why string
	if q := tail(v.dir.qemuLog(), 5); len(q) > 0 {
		why = "; QEMU's log (" + v.dir.qemuLog() + ") ends: " + strings.Join(q, " | ")
	}
	if ee, ok := errors.AsType[*exec.ExitError](v.exitErr); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() != syscall.SIGKILL {
			return fmt.Errorf("%w: %w%s", ErrCrashed, v.exitErr, why)
		}
	}
	if v.exitErr != nil {
		return fmt.Errorf("QEMU exited: %w%s", v.exitErr, why)
	}
	// QEMU exits with no error when the guest resets (-no-reboot): a
	// kernel panic says so on the console first (panic=-1).
	for _, line := range tail(v.dir.console(), 50) {
		if strings.Contains(line, "Kernel panic") {
			return errors.New("QEMU exited: the guest's kernel panicked (its console: " + v.dir.console() + ")" + why)
		}
	}
	return fmt.Errorf("QEMU exited: %w (its console: %s)%s", ErrReset, v.dir.console(), why)
}

// alive reports whether QEMU still runs.
func (v *VM) alive() bool {
	select {
	case <-v.exited:
		return false
	default:
		return true
	}
}

// wake nudges the guest program to look at the queue.
func (v *VM) wake() {
	// QEMU holds the FIFO open for reading, so this open does not block;
	// a full FIFO already holds a wake-up.
	f, err := os.OpenFile(v.dir.wake()+".in", os.O_WRONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return
	}
	_, _ = f.Write([]byte{'\n'})
	_ = f.Close()
}

// Command is a command to run in the guest.
type Command struct {
	Args []string
	// Dir is the working directory in the guest (the host's directories are
	// there at the same paths). Default /.
	Dir string
	// Env is added to the guest program's environment (PATH, HOME).
	Env []string
}

// request is how a command travels to the guest program: <id>.req in the queue.
type request struct {
	Args []string `json:"args"`
	Dir  string   `json:"dir"`
	Env  []string `json:"env,omitempty"`
}

// Run runs c in the guest, copies its output (stdout and stderr
// interleaved) to out as it comes, and returns its exit status. If ctx ends
// first, the command is killed in the guest. If the guest kernel reports a
// stalled CPU meanwhile, Run returns ErrStalled with the report at once:
// the command may never end, and the VM should be stopped.
func (v *VM) Run(ctx context.Context, c Command, out io.Writer) (int, error) {
	if len(c.Args) == 0 {
		return 0, errors.New("no command")
	}
	if !v.alive() {
		return 0, ErrNotRunning
	}
	if c.Dir == "" {
		c.Dir = "/"
	}
	q := v.dir.queue()
	id := fmt.Sprintf("%d-%d", time.Now().UnixNano(), os.Getpid())
	base := filepath.Join(q, id)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return 0, err
	}
	defer func() { _ = w.Close() }()
	if err := w.Add(q); err != nil {
		return 0, err
	}
	req, err := json.Marshal(request(c))
	if err != nil {
		return 0, err
	}
	if err := writeAtomic(base+".req", req); err != nil {
		return 0, err
	}
	defer func() {
		for _, ext := range []string{".req", ".run", ".out", ".exit", ".cancel"} {
			_ = os.Remove(base + ext)
		}
	}()
	v.wake()

	var offset int64
	copyOut := func() error {
		f, err := os.Open(base + ".out")
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			return err
		}
		n, err := io.Copy(out, f)
		offset += n
		return err
	}
	// Only a stall reported from now on is this command's.
	var consoleSeen int64
	if fi, err := os.Stat(v.dir.console()); err == nil {
		consoleSeen = fi.Size()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var cancelled <-chan time.Time
	done := ctx.Done()
	for {
		if err := copyOut(); err != nil {
			return 0, fmt.Errorf("output of %q: %w", c.Args, err)
		}
		if raw, err := os.ReadFile(base + ".exit"); err == nil {
			if err := copyOut(); err != nil {
				return 0, err
			}
			if strings.TrimSpace(string(raw)) == rebootedExit {
				return 0, fmt.Errorf("%q: %w", c.Args, ErrRebooted)
			}
			code, err := strconv.Atoi(strings.TrimSpace(string(raw)))
			if err != nil {
				return 0, fmt.Errorf("exit status of %q: %q", c.Args, raw)
			}
			if cancelled != nil {
				return code, ctx.Err()
			}
			return code, nil
		}
		select {
		case <-w.Events:
		case <-tick.C:
			var stall string
			if stall, consoleSeen = findStall(v.dir.console(), consoleSeen); stall != "" {
				_ = copyOut()
				return 0, fmt.Errorf("%w while running %q (console %s):\n%s", ErrStalled, c.Args, v.dir.console(), stall)
			}
		case <-v.exited:
			_ = copyOut()
			return 0, fmt.Errorf("the VM stopped while running %q (%w); console %s", c.Args, v.exitReason(), v.dir.console())
		case <-done:
			// Ask the guest program to kill it, and give it a moment.
			done = nil
			_ = os.WriteFile(base+".cancel", nil, 0o644)
			v.wake()
			cancelled = time.After(10 * time.Second)
		case <-cancelled:
			return 0, fmt.Errorf("%q %w after it was cancelled: %w", c.Args, ErrStillRuns, ctx.Err())
		}
	}
}

func writeAtomic(path string, data []byte) error {
	if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// Shutdown powers the guest off and waits for QEMU to exit; a QEMU that
// does not exit in time is killed. Shutting down a stopped VM is harmless.
func (v *VM) Shutdown(ctx context.Context) error {
	unlock, err := lock(v.dir)
	if err != nil {
		return err
	}
	defer unlock()
	if v.alive() {
		_ = writeAtomic(filepath.Join(v.dir.queue(), "poweroff"), nil)
		v.wake()
		select {
		case <-v.exited:
		case <-time.After(30 * time.Second):
			klog.FromContext(ctx).Info("The guest did not power off in time; killing QEMU", "pid", v.pid)
			v.kill(ctx)
		case <-ctx.Done():
			v.kill(ctx)
		}
	}
	if pid, err := os.ReadFile(v.dir.pidfile()); err == nil && strings.TrimSpace(string(pid)) == strconv.Itoa(v.pid) {
		_ = os.Remove(v.dir.pidfile())
	}
	if v.alive() {
		return fmt.Errorf("qemu pid %d did not exit", v.pid)
	}
	return nil
}

// PullPlug kills QEMU at once (SIGKILL), as a power cut ends a machine:
// the guest writes nothing more, and what the guest's kernel had not yet
// given the disk is lost. It returns once QEMU has exited.
func (v *VM) PullPlug(ctx context.Context) error {
	if !v.alive() {
		return nil
	}
	if !ours(v.dir, v.pid) {
		return fmt.Errorf("qemu pid %d is not this rig's: not killed", v.pid)
	}
	if err := unix.Kill(v.pid, unix.SIGKILL); err != nil {
		return fmt.Errorf("kill qemu pid %d: %w", v.pid, err)
	}
	select {
	case <-v.exited:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WaitReboot waits, until timeout passes, for the guest program of the
// guest's next boot (Options.Reboot) to serve commands, and returns what it
// reported (as Ready, which it updates). A boot is told from the last one
// by its boot ID, which the guest program reports with its readiness.
func (v *VM) WaitReboot(ctx context.Context, timeout time.Duration) (string, error) {
	last := v.Ready
	ready, err := v.waitContent(ctx, v.dir.ready(), timeout, func(data []byte) bool {
		return strings.TrimSpace(string(data)) != last
	})
	if err != nil {
		return "", fmt.Errorf("the guest's next boot: %w (console %s)", err, v.dir.console())
	}
	v.Ready = strings.TrimSpace(string(ready))
	return v.Ready, nil
}

// kill ends QEMU: SIGTERM, then SIGKILL. Only this rig's QEMU is signalled.
func (v *VM) kill(ctx context.Context) {
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGKILL} {
		if !v.alive() || !ours(v.dir, v.pid) {
			return
		}
		klog.FromContext(ctx).V(2).Info("Signalling QEMU", "pid", v.pid, "signal", sig)
		_ = unix.Kill(v.pid, sig)
		select {
		case <-v.exited:
			return
		case <-time.After(5 * time.Second):
		}
	}
}
