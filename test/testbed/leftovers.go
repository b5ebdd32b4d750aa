package testbed

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Leftovers lists what of a bed in cfg.Dir is still on the machine:
// processes run from its directory or its components' builds, mounts below its
// directory, links with its prefix, its cgroups and its named netns. After
// Stop it must be empty.
func Leftovers(cfg Config) []string {
	var out []string
	seen := map[int]bool{}
	// The bed's components run from its builds in the cache; other
	// programs' files there (a VM's kernel) are not the bed's, nor is helm:
	// the bed runs it to its end, while other tests (make test's chart
	// tests, beside the bed) run the same build.
	needles := []string{cfg.Dir + "/"}
	if v, err := cfg.Versions(); err == nil {
		b := binariesIn(cfg.CacheDir, v)
		for _, dir := range []string{b.kubernetes, b.etcd, b.containerd, b.runc, b.cni, b.crio} {
			needles = append(needles, dir+"/")
		}
	}
	for _, needle := range needles {
		for _, p := range processesMatching(needle) {
			if !seen[p.PID] {
				seen[p.PID] = true
				out = append(out, fmt.Sprintf("process %d: %s", p.PID, p.Name))
			}
		}
	}
	for _, m := range mountsUnder(cfg.Dir, "") {
		out = append(out, "mount "+m)
	}
	if n := selfBinds(cfg.Dir); n > 0 {
		out = append(out, fmt.Sprintf("mount %s (bound on itself %d times)", cfg.Dir, n))
	}
	out = append(out, leftoverLinks(cfg)...)
	for _, d := range cgroupDirs(cfg.CgroupName) {
		out = append(out, "cgroup "+d)
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), cfg.LinkPrefix) {
				out = append(out, "netns "+e.Name())
			}
		}
	}
	return out
}

// mountsUnder lists the mount points below dir, of the file system type
// fstype ("" for any), deepest first.
func mountsUnder(dir, fstype string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	prefix := filepath.Clean(dir) + "/"
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		// The type follows the optional fields' end, "-".
		if sep := slices.Index(fields, "-"); fstype != "" && (sep < 0 || sep+1 >= len(fields) || fields[sep+1] != fstype) {
			continue
		}
		// Mount points escape spaces and the like as octal.
		mp := unescapeMountPoint(fields[4])
		if strings.HasPrefix(mp, prefix) {
			out = append(out, mp)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return slices.Compact(out)
}

func unescapeMountPoint(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder detaches every mount below dir (netns files, overlays, shm).
func unmountUnder(dir string) error {
	var errs []error
	for _, m := range mountsUnder(dir, "") {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// shareDir bind-mounts dir on itself and makes it a shared mount, as
// systemd makes / on a real node: the runtime's later mounts below it (pod
// network namespaces) reach containers that mount a path below it with
// HostToContainer propagation, and a privileged container's mounts (a
// bpffs) reach the host with Bidirectional. The runtime refuses both
// propagations for paths on a private mount, and this machine's / may be
// one.
func shareDir(dir string) error {
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mount %s on itself: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return errors.Join(fmt.Errorf("make %s a shared mount: %w", dir, err), unix.Unmount(dir, unix.MNT_DETACH))
	}
	return nil
}

// unshareDir undoes shareDir (every time it was done), after the mounts
// below dir are gone.
func unshareDir(dir string) error {
	for range selfBinds(dir) {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return nil
}

// selfBinds counts the mounts of dir on itself: bind mounts at dir of a
// directory of a file system. A file system mounted at dir (showing its
// root) is not counted: the bed never mounts one there.
func selfBinds(dir string) int {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && unescapeMountPoint(fields[4]) == dir && fields[3] != "/" {
			n++
		}
	}
	return n
}

// httpReady returns a readiness check that GETs url and wants 200. The
// components serve self-signed certificates: the check does not verify them.
func httpReady(url string) func(context.Context) error {
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}
}
