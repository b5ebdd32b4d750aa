package devices

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// sysfs reads a sysfs tree below root: "/" on a live host, a fixture tree
// laid out as the kernel lays it out in tests.
type sysfs struct{ root string }

func (s sysfs) path(elem ...string) string {
	return filepath.Join(append([]string{s.root, "sys"}, elem...)...)
}

func (s sysfs) live() bool { return filepath.Clean(s.root) == "/" }

// pciDevice is the sysfs directory of a PCI function.
func (s sysfs) pciDevice(addr string, elem ...string) string {
	return s.path(append([]string{"bus", "pci", "devices", addr}, elem...)...)
}

// readTrimmed reads a small sysfs attribute. Attributes fit in a page; one
// read, without os.ReadFile's stat and second read, keeps discovery of a
// thousand VFs fast.
func readTrimmed(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var buf [4096]byte
	n, err := f.Read(buf[:])
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// readInt reads a decimal (or 0x-prefixed hex) integer file.
func readInt(path string) (int, error) {
	s, err := readTrimmed(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: malformed integer %q", path, s)
	}
	return int(v), nil
}

// readOptionalInt reads an integer file that may be absent (def then).
func readOptionalInt(path string, def int) (int, error) {
	v, err := readInt(path)
	if errors.Is(err, fs.ErrNotExist) {
		return def, nil
	}
	return v, err
}

// linkBase is the last element of a symlink's target ("" if no link).
func linkBase(path string) string {
	dest, err := os.Readlink(path)
	if err != nil {
		return ""
	}
	return filepath.Base(dest)
}

// parallel runs fn(0..n-1) on as many goroutines as there are CPUs: sysfs
// reads are syscalls, and a thousand VFs are thousands of them.
func parallel(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		})
	}
	wg.Wait()
}
