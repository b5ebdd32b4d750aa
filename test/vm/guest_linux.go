package vm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// guestPath is the guest program's PATH, and so the commands'.
const guestPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Guest is the guest program, the VM's own side: stage 1 starts it (as
// `<program> guest`) once the host's root is mounted. It readies the guest
// (run-time mounts, the kernel's modules, device drivers loaded as udev
// would load them, loopback up), tells the host it is ready, and runs the
// commands the host queues until the host asks for the VM to power off;
// then it powers the VM off.
func Guest(ctx context.Context) error {
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return err
	}
	params := map[string]string{}
	for _, f := range strings.Fields(string(cmdline)) {
		if k, v, ok := strings.Cut(f, "="); ok {
			params[k] = v
		}
	}
	share, modules := params["fastpath.share"], params["fastpath.modules"]
	if err := os.Setenv("PATH", guestPath); err != nil {
		return err
	}
	if share == "" || modules == "" {
		return fmt.Errorf("not in the fastpath VM: no fastpath.share= or fastpath.modules= in /proc/cmdline (%s)", strings.TrimSpace(string(cmdline)))
	}
	d := runDir(filepath.Dir(share))

	step("mount the share, /run, /dev/pts and /dev/shm")
	for _, m := range []struct{ src, dst, fstype, opts string }{
		{"share", share, "9p", "trans=virtio,version=9p2000.L,msize=512000"},
		// The guest's own /run: the host's (its network namespaces, its
		// sockets) must not show through.
		{"tmpfs", "/run", "tmpfs", "mode=0755"},
		{"devpts", "/dev/pts", "devpts", "ptmxmode=0666"},
		{"tmpfs", "/dev/shm", "tmpfs", "mode=1777"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.fstype, 0, m.opts); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.dst, err)
		}
	}

	step("link the guest kernel's modules into /lib/modules")
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return err
	}
	release := unix.ByteSliceToString(uts.Release[:])
	if err := os.MkdirAll("/lib/modules", 0o755); err != nil {
		return err
	}
	_ = os.RemoveAll(filepath.Join("/lib/modules", release))
	if err := os.Symlink(modules, filepath.Join("/lib/modules", release)); err != nil {
		return err
	}

	step("load the drivers of the devices present, and of those that come")
	if err := hotplug(); err != nil {
		return err
	}
	coldplug()

	if err := unix.Sethostname([]byte("fastpath-vm")); err != nil {
		return err
	}
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}

	wake, err := wakeUps()
	if err != nil {
		return err
	}
	endCutShort(d.queue())
	up := uptime()
	bootID, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return err
	}
	if err := writeAtomic(d.ready(), fmt.Appendf(nil, "guest uptime %s, kernel %s, boot %s\n", up, release, bytes.TrimSpace(bootID))); err != nil {
		return err
	}
	fmt.Printf("fastpath-vm: ready at %s of guest uptime\n", up)
	serve(ctx, d.queue(), wake)
	fmt.Println("fastpath-vm: powering off")
	unix.Sync()
	return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

// step logs a step on the console, where the host finds the last one when a
// boot fails.
func step(s string) { fmt.Printf("fastpath-vm: step: guest: %s (%s)\n", s, uptime()) }

func uptime() string {
	raw, _ := os.ReadFile("/proc/uptime")
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return "?"
	}
	return f[0] + "s"
}

// coldplug loads the modules of the devices present: the guest has no
// udev to do it.
func coldplug() {
	files, _ := filepath.Glob("/sys/bus/*/devices/*/modalias")
	var aliases []string
	for _, f := range files {
		if a, err := os.ReadFile(f); err == nil && len(bytes.TrimSpace(a)) > 0 {
			aliases = append(aliases, string(bytes.TrimSpace(a)))
		}
	}
	slices.Sort(aliases)
	modprobe(slices.Compact(aliases)...)
}

// hotplug loads the module of each device the kernel adds from now on (as
// udev does: the VFs of a PF get their driver so): it listens to the
// kernel's uevents.
func hotplug() error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return fmt.Errorf("uevent socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		_ = unix.Close(fd)
		return fmt.Errorf("uevent socket: %w", err)
	}
	go func() {
		buf := make([]byte, 64*1024)
		for {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) {
					continue
				}
				fmt.Printf("fastpath-vm: uevents: %v\n", err)
				return
			}
			var add bool
			var alias string
			for _, kv := range bytes.Split(buf[:n], []byte{0}) {
				switch {
				case string(kv) == "ACTION=add":
					add = true
				case bytes.HasPrefix(kv, []byte("MODALIAS=")):
					alias = string(kv[len("MODALIAS="):])
				}
			}
			if add && alias != "" {
				modprobe(alias)
			}
		}
	}()
	return nil
}

func modprobe(aliases ...string) {
	if len(aliases) == 0 {
		return
	}
	// -b: blacklists apply, as with udev. Aliases without a module are no
	// error worth reporting.
	_ = exec.Command("modprobe", append([]string{"-q", "-b", "-a"}, aliases...)...).Run()
}

// wakeUps returns a channel that receives when the host writes to the wake
// port.
func wakeUps() (<-chan struct{}, error) {
	names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
	for _, n := range names {
		if raw, err := os.ReadFile(n); err != nil || strings.TrimSpace(string(raw)) != wakePort {
			continue
		}
		port, err := os.Open(filepath.Join("/dev", filepath.Base(filepath.Dir(n))))
		if err != nil {
			return nil, fmt.Errorf("open the wake port: %w", err)
		}
		wake := make(chan struct{}, 1)
		go func() {
			buf := make([]byte, 512)
			for {
				if _, err := port.Read(buf); err != nil {
					fmt.Printf("fastpath-vm: wake port: %v\n", err)
					return
				}
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}()
		return wake, nil
	}
	return nil, fmt.Errorf("no virtio port named %s", wakePort)
}

// endCutShort ends the commands of the queue that a reboot cut short: they
// were running when the guest went down (Options.Reboot). Their callers
// learn so (ErrRebooted).
func endCutShort(q string) {
	runs, _ := filepath.Glob(filepath.Join(q, "*.run"))
	for _, r := range runs {
		_ = writeAtomic(strings.TrimSuffix(r, ".run")+".exit", []byte(rebootedExit+"\n"))
	}
}

// serve runs the queued commands, one at a time in the order queued, until
// the host asks for the power off.
func serve(ctx context.Context, q string, wake <-chan struct{}) {
	// A safety net, should a wake-up get lost.
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		if _, err := os.Stat(filepath.Join(q, "poweroff")); err == nil {
			return
		}
		reqs, _ := filepath.Glob(filepath.Join(q, "*.req"))
		slices.Sort(reqs)
		for _, r := range reqs {
			runRequest(strings.TrimSuffix(r, ".req"), wake, tick.C)
		}
		select {
		case <-wake:
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// runRequest runs the command queued as base.req: output to base.out, exit
// status to base.exit; base.cancel kills it.
func runRequest(base string, wake <-chan struct{}, tick <-chan time.Time) {
	if err := os.Rename(base+".req", base+".run"); err != nil {
		return
	}
	code := 0
	out, err := os.OpenFile(base+".out", os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		fmt.Printf("fastpath-vm: %v\n", err)
		return
	}
	var exit *exec.ExitError
	switch err := start(base, out, wake, tick); {
	case errors.As(err, &exit):
		code = exitCode(exit)
	case err != nil:
		fmt.Fprintf(out, "fastpath-vm: %v\n", err)
		code = 127
	}
	_ = out.Close()
	_ = writeAtomic(base+".exit", []byte(strconv.Itoa(code)+"\n"))
}

func start(base string, out *os.File, wake <-chan struct{}, tick <-chan time.Time) error {
	raw, err := os.ReadFile(base + ".run")
	if err != nil {
		return err
	}
	var req request
	if err := json.Unmarshal(raw, &req); err != nil || len(req.Args) == 0 {
		return fmt.Errorf("bad request %s: %q", base, raw)
	}
	// The guest's view of the host's files is cached: drop it, so files the
	// host wrote since the boot are seen as they are now.
	_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0)
	cmd := exec.Command(req.Args[0], req.Args[1:]...)
	cmd.Dir = req.Dir
	cmd.Env = append([]string{"PATH=" + guestPath, "HOME=/root"}, req.Env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			return err
		case <-wake:
		case <-tick:
		}
		if _, err := os.Stat(base + ".cancel"); err == nil {
			_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		}
	}
}

func exitCode(e *exec.ExitError) int {
	if ws, ok := e.Sys().(unix.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return e.ExitCode()
}
