package sysfsfixture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Kernel plays the kernel's part in PCI driver binding below a fixture
// root, so that code writing driver_override, unbind, bind and
// drivers_probe can be tested without hardware. The control files are
// named pipes: every write reaches the kernel, in order, as it does in
// sysfs. Like the kernel, it:
//   - binds on drivers_probe to the driver_override driver, or else to the
//     function's own driver (the one it had when the kernel started);
//   - binds on drivers/<d>/bind unless driver_override names another
//     driver;
//   - takes a function's netdev away while its network driver is unbound,
//     and gives it back when that driver binds again;
//   - makes dev/vfio/<group> below its dev root while a function of the
//     group is bound to vfio-pci (vfio-pci refuses a function without an
//     IOMMU group).
type Kernel struct {
	root, devRoot string
	charDevices   bool

	mu      sync.Mutex
	own     map[string]string // function -> its driver at start
	refuse  map[string]bool   // drivers that fail to bind
	stashed map[string]string // function -> its netdev's name, while taken away
	writes  []string          // "<file> <value>", in order
	pipes   []string
	done    chan struct{}
	wg      sync.WaitGroup
	stopped bool
}

// StartKernel starts a kernel for the fixture below root, with device nodes
// below devRoot. With charDevices, the VFIO nodes are character devices
// (the numbers of /dev/null, which needs root), as a container runtime
// wants them; otherwise plain files. Call Stop when done.
func StartKernel(root, devRoot string, charDevices bool) (*Kernel, error) {
	k := &Kernel{root: root, devRoot: devRoot, charDevices: charDevices, own: map[string]string{},
		refuse: map[string]bool{}, stashed: map[string]string{}, done: make(chan struct{})}
	devs, err := os.ReadDir(k.sys("bus", "pci", "devices"))
	if err != nil {
		return nil, err
	}
	drivers := map[string]bool{"vfio-pci": true}
	for _, d := range devs {
		addr := d.Name()
		if drv := k.driver(addr); drv != "" {
			k.own[addr] = drv
			drivers[drv] = true
		}
		override := k.sys("bus", "pci", "devices", addr, "driver_override")
		if _, err := os.Stat(override); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(override, []byte("(null)\n"), 0o644); err != nil {
				return nil, err
			}
		}
		if k.driver(addr) == "vfio-pci" {
			if err := k.makeGroupNode(addr); err != nil {
				return nil, err
			}
		}
	}
	if err := k.makeNode(filepath.Join(devRoot, "dev", "vfio", "vfio")); err != nil {
		return nil, err
	}
	if err := k.pipe(k.sys("bus", "pci", "drivers_probe"), k.probe); err != nil {
		k.Stop()
		return nil, err
	}
	for drv := range drivers {
		drv := drv
		if err := k.pipe(k.sys("bus", "pci", "drivers", drv, "bind"), func(addr string) { k.bindTo(addr, drv) }); err != nil {
			k.Stop()
			return nil, err
		}
		if err := k.pipe(k.sys("bus", "pci", "drivers", drv, "unbind"), func(addr string) { k.unbindFrom(addr, drv) }); err != nil {
			k.Stop()
			return nil, err
		}
	}
	return k, nil
}

// Refuse makes binding to driver fail from now on, as a driver whose probe
// fails does.
func (k *Kernel) Refuse(driver string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refuse[driver] = true
}

// Writes are the control writes the kernel got, "<file> <value>" with file
// relative to sys/bus/pci, in order.
func (k *Kernel) Writes() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.writes...)
}

// Driver is the driver the function at addr is bound to now, "" for none.
func (k *Kernel) Driver(addr string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.driver(addr)
}

// Stop stops the kernel and removes its pipes.
func (k *Kernel) Stop() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	k.stopped = true
	close(k.done)
	pipes := k.pipes
	k.mu.Unlock()
	finished := make(chan struct{})
	go func() { k.wg.Wait(); close(finished) }()
	// Wake the readers waiting in open, until none is left: a reader may
	// be on its way back into open while it is poked.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, p := range pipes {
			if fd, err := unix.Open(p, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
				_ = unix.Close(fd)
			}
		}
		select {
		case <-finished:
		case <-tick.C:
			continue
		}
		break
	}
	for _, p := range pipes {
		_ = os.Remove(p)
	}
}

func (k *Kernel) sys(parts ...string) string {
	return filepath.Join(append([]string{k.root, "sys"}, parts...)...)
}

// pipe makes path a named pipe whose writes, one value per line, go to
// handle.
func (k *Kernel) pipe(path string, handle func(string)) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	_ = os.Remove(path)
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return fmt.Errorf("mkfifo %s: %w", path, err)
	}
	k.pipes = append(k.pipes, path)
	rel, _ := filepath.Rel(k.sys("bus", "pci"), path)
	k.wg.Go(func() {
		for {
			f, err := os.OpenFile(path, os.O_RDONLY, 0)
			select {
			case <-k.done:
				if err == nil {
					_ = f.Close()
				}
				return
			default:
			}
			if err != nil {
				return
			}
			data, _ := io.ReadAll(f)
			_ = f.Close()
			for _, v := range strings.Fields(string(data)) {
				k.mu.Lock()
				k.writes = append(k.writes, rel+" "+v)
				k.mu.Unlock()
				handle(v)
			}
		}
	})
	return nil
}

func (k *Kernel) driver(addr string) string {
	target, err := os.Readlink(k.sys("bus", "pci", "devices", addr, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(target)
}

func (k *Kernel) override(addr string) string {
	data, _ := os.ReadFile(k.sys("bus", "pci", "devices", addr, "driver_override"))
	v := strings.TrimSpace(string(data))
	if v == "(null)" {
		return ""
	}
	return v
}

// whenUnbound runs do under the lock once the function at addr has no
// driver, or not at all if it keeps one. Each control file has its own
// reader, so a probe can arrive before the unbind written just before it;
// the real kernel would have done that unbind already.
func (k *Kernel) whenUnbound(addr string, do func()) {
	_ = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, time.Second, true, func(context.Context) (bool, error) {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.driver(addr) != "" {
			return false, nil
		}
		do()
		return true, nil
	})
}

func (k *Kernel) probe(addr string) {
	k.whenUnbound(addr, func() { k.probeLocked(addr) })
}

func (k *Kernel) probeLocked(addr string) {
	drv := k.override(addr)
	if drv == "" {
		drv = k.own[addr]
	}
	if drv != "" {
		k.bind(addr, drv)
	}
}

func (k *Kernel) bindTo(addr, drv string) {
	k.whenUnbound(addr, func() { k.bindToLocked(addr, drv) })
}

func (k *Kernel) bindToLocked(addr, drv string) {
	if o := k.override(addr); o != "" && o != drv {
		return
	}
	k.bind(addr, drv)
}

func (k *Kernel) unbindFrom(addr, drv string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.driver(addr) != drv {
		return
	}
	dir := k.sys("bus", "pci", "devices", addr)
	_ = os.Remove(filepath.Join(dir, "driver"))
	_ = os.Remove(k.sys("bus", "pci", "drivers", drv, addr))
	if drv == "vfio-pci" {
		if g := k.group(addr); g >= 0 {
			_ = os.Remove(filepath.Join(k.devRoot, "dev", "vfio", strconv.Itoa(g)))
		}
		return
	}
	// The netdev goes with its driver.
	nets, _ := os.ReadDir(filepath.Join(dir, "net"))
	_ = os.MkdirAll(filepath.Dir(k.stash(addr)), 0o755)
	for _, n := range nets {
		k.stashed[addr] = n.Name()
		_ = os.Remove(k.sys("class", "net", n.Name()))
		_ = os.Rename(filepath.Join(dir, "net", n.Name()), k.stash(addr))
	}
}

func (k *Kernel) stash(addr string) string {
	return filepath.Join(k.root, ".kernel-stash", addr)
}

func (k *Kernel) bind(addr, drv string) {
	if k.refuse[drv] || (drv == "vfio-pci" && k.group(addr) < 0) {
		return
	}
	dir := k.sys("bus", "pci", "devices", addr)
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return
	}
	drvDir := k.sys("bus", "pci", "drivers", drv)
	if rel, err := filepath.Rel(real, drvDir); err == nil {
		_ = os.Symlink(rel, filepath.Join(real, "driver"))
	}
	if rel, err := filepath.Rel(drvDir, real); err == nil {
		_ = os.Symlink(rel, filepath.Join(drvDir, addr))
	}
	if drv == "vfio-pci" {
		_ = k.makeGroupNode(addr)
		return
	}
	if name, ok := k.stashed[addr]; ok && drv == k.own[addr] {
		delete(k.stashed, addr)
		_ = os.MkdirAll(filepath.Join(real, "net"), 0o755)
		ndir := filepath.Join(real, "net", name)
		if os.Rename(k.stash(addr), ndir) == nil {
			if rel, err := filepath.Rel(k.sys("class", "net"), ndir); err == nil {
				_ = os.Symlink(rel, k.sys("class", "net", name))
			}
		}
	}
}

func (k *Kernel) group(addr string) int {
	target, err := os.Readlink(k.sys("bus", "pci", "devices", addr, "iommu_group"))
	if err != nil {
		return -1
	}
	g, err := strconv.Atoi(filepath.Base(target))
	if err != nil {
		return -1
	}
	return g
}

func (k *Kernel) makeGroupNode(addr string) error {
	g := k.group(addr)
	if g < 0 {
		return nil
	}
	return k.makeNode(filepath.Join(k.devRoot, "dev", "vfio", strconv.Itoa(g)))
}

func (k *Kernel) makeNode(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if _, err := os.Lstat(path); err == nil {
		return nil
	}
	if !k.charDevices {
		return os.WriteFile(path, nil, 0o600)
	}
	var st unix.Stat_t
	if err := unix.Stat("/dev/null", &st); err != nil {
		return err
	}
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(st.Rdev)); err != nil {
		return fmt.Errorf("mknod %s: %w", path, err)
	}
	return nil
}
