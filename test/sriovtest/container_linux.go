package sriovtest

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// Container runs commands as a container made from a CDI device alone
// would run, as the runtime makes it: in a mount namespace of its own
// whose /dev holds only the device's nodes (and the runtime's null, zero
// and urandom), with a sysfs of its network namespace, and with only the
// device's environment (and PATH).
type Container struct {
	Device *cdi.Device
	// NetNS is the pod's network namespace to run in; "" for a new one.
	NetNS string
	// Hugepages mounts hugetlbfs at /dev/hugepages.
	Hugepages bool
}

// Command is script run by sh in the container. It runs in a process
// group of its own; SIGINT to the group (as cancelling ctx sends) stops
// it.
func (c Container) Command(ctx context.Context, script string) *exec.Cmd {
	var s strings.Builder
	s.WriteString("set -e\nmount -t tmpfs -o mode=755 tmpfs /run\nmkdir /run/stage\n")
	nodes := map[string]string{"/dev/null": "/dev/null", "/dev/zero": "/dev/zero", "/dev/urandom": "/dev/urandom"}
	for _, n := range c.Device.ContainerEdits.DeviceNodes {
		host := n.HostPath
		if host == "" {
			host = n.Path
		}
		nodes[n.Path] = host
	}
	paths := slices.Sorted(maps.Keys(nodes))
	for i, path := range paths {
		fmt.Fprintf(&s, "touch /run/stage/%d && mount --bind %s /run/stage/%d\n", i, nodes[path], i)
	}
	s.WriteString("mount -t tmpfs -o mode=755 tmpfs /dev\nmount -t sysfs sysfs /sys\n")
	if c.Hugepages {
		s.WriteString("mkdir -p /dev/hugepages && mount -t hugetlbfs nodev /dev/hugepages\n")
	}
	for i, path := range paths {
		fmt.Fprintf(&s, "mkdir -p $(dirname %s) && touch %s && mount --move /run/stage/%d %s\n", path, path, i, path)
	}
	env := append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, c.Device.ContainerEdits.Env...)
	fmt.Fprintf(&s, "exec env -i %s sh -c %s\n", strings.Join(env, " "), quote(script))
	args := []string{"unshare", "--mount", "--fork", "--propagation", "private", "--kill-child=SIGINT", "sh", "-c", s.String()}
	if c.NetNS == "" {
		args = slices.Insert(args, 2, "--net")
	} else {
		args = append([]string{"nsenter", "--net=" + c.NetNS}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = 20 * time.Second
	return cmd
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
