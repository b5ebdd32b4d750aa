package vm

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestModuleLoadOrder(t *testing.T) {
	tree := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(tree, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("modules.builtin", "kernel/drivers/virtio/virtio_pci.ko\n")
	write("modules.dep", `kernel/fs/netfs/netfs.ko.xz:
kernel/net/9p/9pnet.ko.xz:
kernel/net/9p/9pnet_virtio.ko.xz: kernel/net/9p/9pnet.ko.xz
kernel/fs/9p/9p.ko.xz: kernel/net/9p/9pnet.ko.xz kernel/fs/netfs/netfs.ko.xz
kernel/fs/overlayfs/overlay.ko.xz:
kernel/drivers/net/dummy.ko.xz:
`)
	got, err := moduleLoadOrder(tree, []string{"virtio-pci", "9pnet_virtio", "9p", "overlay"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kernel/net/9p/9pnet.ko.xz", "kernel/net/9p/9pnet_virtio.ko.xz", "kernel/fs/netfs/netfs.ko.xz",
		"kernel/fs/9p/9p.ko.xz", "kernel/fs/overlayfs/overlay.ko.xz"}
	if !slices.Equal(got, want) {
		t.Errorf("load order %q, want %q (dependencies first, each once, built-ins left out)", got, want)
	}
	if _, err := moduleLoadOrder(tree, []string{"nosuch"}); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("a missing module: %v", err)
	}
}

// readCPIO reads a newc archive back: name -> mode and data.
func readCPIO(t *testing.T, b []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	align := func(n int) int { return (n + 3) &^ 3 }
	for off := 0; ; {
		h := string(b[off : off+110])
		if !strings.HasPrefix(h, "070701") {
			t.Fatalf("bad magic at %d: %q", off, h[:6])
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(h[6+8*i:14+8*i], 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			return int(v)
		}
		mode, size, rmaj, rmin, namesize := field(1), field(6), field(9), field(10), field(11)
		name := string(b[off+110 : off+110+namesize-1])
		off = align(off + 110 + namesize)
		data := string(b[off : off+size])
		off = align(off + size)
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out[name] = strconv.FormatInt(int64(mode), 8) + " " + strconv.Itoa(rmaj) + ":" + strconv.Itoa(rmin) + " " + data
	}
}

func TestCPIO(t *testing.T) {
	var buf bytes.Buffer
	c := &cpioWriter{w: &buf}
	c.entry("dev", fs.ModeDir|0o755, nil)
	c.entry("dev/console", fs.ModeCharDevice|0o600, nil, 5, 1)
	c.entry("init", 0o755, []byte("#!/bin/sh\n"))
	c.entry("bin/sh", fs.ModeSymlink|0o777, []byte("busybox"))
	if err := c.close(); err != nil {
		t.Fatal(err)
	}
	got := readCPIO(t, buf.Bytes())
	want := map[string]string{
		"dev":         "40755 0:0 ",
		"dev/console": "20600 5:1 ",
		"init":        "100755 0:0 #!/bin/sh\n",
		"bin/sh":      "120777 0:0 busybox",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s = %q, want %q", name, got[name], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("entries %v", got)
	}
}

func TestLastStep(t *testing.T) {
	console := filepath.Join(t.TempDir(), "console.log")
	for _, tc := range []struct{ log, want string }{
		{"[    0.1] Linux version 6.12\n", "the kernel starting (nothing from the initramfs on the console yet)"},
		{"fastpath-vm: step: load the initramfs modules (9p.ko)\nfastpath-vm: step: mount the host's root over 9p\n[ 3.0] 9pnet: blah\n",
			"mount the host's root over 9p"},
		{"fastpath-vm: step: mount the host's root over 9p\nfastpath-vm: FAILED: mount the host's root (9p tag hostroot)\n",
			"mount the host's root over 9p (failed: mount the host's root (9p tag hostroot))"},
	} {
		if err := os.WriteFile(console, []byte(tc.log), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := lastStep(console); got != tc.want {
			t.Errorf("lastStep(%q) = %q, want %q", tc.log, got, tc.want)
		}
	}
}
