package vm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/klog/v2"
)

// Image is what the VM boots: a Debian kernel, unpacked from its package by
// test/deps.sh, and an initramfs built from busybox and the kernel's own
// modules.
type Image struct {
	Kernel  string // the kernel image (vmlinuz)
	Release string // the guest's kernel release, e.g. 6.12.95+deb12-amd64
	// Modules is the kernel's module tree, lib/modules/<Release>: the guest
	// loads its modules from there.
	Modules   string
	Initramfs string
}

// initramfsModules are what stage 1 needs to mount the host's root: 9p
// over virtio and overlayfs. Their dependencies come along; modules built
// into the kernel are skipped.
var initramfsModules = []string{"9pnet_virtio", "9p", "overlay"}

//go:embed init.sh
var stage1 []byte

// BuildImage finds the kernel in kernelDir (an unpacked linux-image package
// whose module tree depmod has indexed) and builds the initramfs into dir,
// unless one built from the same inputs is there.
func BuildImage(ctx context.Context, kernelDir, busybox, dir string) (Image, error) {
	kernels, err := filepath.Glob(filepath.Join(kernelDir, "boot", "vmlinuz-*"))
	if err != nil || len(kernels) != 1 {
		return Image{}, fmt.Errorf("want one boot/vmlinuz-* in %s (test/deps.sh vm unpacks it), found %d", kernelDir, len(kernels))
	}
	img := Image{Kernel: kernels[0], Release: strings.TrimPrefix(filepath.Base(kernels[0]), "vmlinuz-")}
	img.Modules = filepath.Join(kernelDir, "lib", "modules", img.Release)
	mods, err := moduleLoadOrder(img.Modules, initramfsModules)
	if err != nil {
		return Image{}, err
	}
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return Image{}, fmt.Errorf("busybox (test/deps.sh vm unpacks it): %w", err)
	}

	// The initramfs is named after everything it is made of.
	h := sha256.New()
	h.Write(stage1)
	h.Write(bb)
	fmt.Fprintln(h, img.Release, mods)
	img.Initramfs = filepath.Join(dir, fmt.Sprintf("initramfs-%s-%s.cpio.gz", img.Release, hex.EncodeToString(h.Sum(nil))[:12]))
	if _, err := os.Stat(img.Initramfs); err == nil {
		return img, nil
	}

	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	c := &cpioWriter{w: gz}
	for _, d := range []string{"bin", "dev", "proc", "sys", "host", "rw", "root", "modules"} {
		c.entry(d, fs.ModeDir|0o755, nil)
	}
	c.entry("dev/console", fs.ModeCharDevice|0o600, nil, 5, 1)
	c.entry("init", 0o755, stage1)
	c.entry("bin/busybox", 0o755, bb)
	var order []string
	for _, m := range mods {
		data, err := readModule(ctx, filepath.Join(img.Modules, m))
		if err != nil {
			return Image{}, err
		}
		name := moduleName(m) + ".ko"
		c.entry("modules/"+name, 0o644, data)
		order = append(order, name)
	}
	c.entry("modules/order", 0o644, []byte(strings.Join(order, "\n")+"\n"))
	if err := c.close(); err != nil {
		return Image{}, fmt.Errorf("write the initramfs: %w", err)
	}
	if err := gz.Close(); err != nil {
		return Image{}, fmt.Errorf("compress the initramfs: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Image{}, err
	}
	tmp := img.Initramfs + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return Image{}, fmt.Errorf("write the initramfs: %w", err)
	}
	if err := os.Rename(tmp, img.Initramfs); err != nil {
		return Image{}, fmt.Errorf("write the initramfs: %w", err)
	}
	klog.FromContext(ctx).Info("Built the initramfs", "path", img.Initramfs, "modules", order)
	return img, nil
}

// moduleName is a module's name as the kernel knows it:
// kernel/net/9p/9pnet_virtio.ko.xz -> 9pnet_virtio, with '-' as '_'.
func moduleName(path string) string {
	base := filepath.Base(path)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// moduleLoadOrder returns the files (relative to the module tree) of the
// wanted modules and of everything they depend on, each after its
// dependencies, from modules.dep. Modules built into the kernel
// (modules.builtin) need no file and are left out.
func moduleLoadOrder(tree string, want []string) ([]string, error) {
	builtin := map[string]bool{}
	if err := eachLine(filepath.Join(tree, "modules.builtin"), func(line string) {
		builtin[moduleName(line)] = true
	}); err != nil {
		return nil, err
	}
	deps := map[string][]string{} // file -> the files it needs
	byName := map[string]string{} // name -> file
	if err := eachLine(filepath.Join(tree, "modules.dep"), func(line string) {
		file, needs, _ := strings.Cut(line, ":")
		deps[file] = strings.Fields(needs)
		byName[moduleName(file)] = file
	}); err != nil {
		return nil, err
	}
	var order []string
	seen := map[string]bool{}
	var visit func(file string)
	visit = func(file string) {
		if seen[file] {
			return
		}
		seen[file] = true
		for _, d := range deps[file] {
			visit(d)
		}
		order = append(order, file)
	}
	for _, name := range want {
		name = strings.ReplaceAll(name, "-", "_")
		if builtin[name] {
			continue
		}
		file, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("kernel module %s is neither in %s/modules.dep nor built in", name, tree)
		}
		visit(file)
	}
	return order, nil
}

func eachLine(path string, fn func(string)) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("kernel module index: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			fn(line)
		}
	}
	return sc.Err()
}

// readModule returns a module file decompressed: busybox's insmod takes
// plain ELF objects.
func readModule(ctx context.Context, path string) ([]byte, error) {
	var tool string
	switch filepath.Ext(path) {
	case ".ko":
		return os.ReadFile(path)
	case ".xz":
		tool = "xz"
	case ".zst":
		tool = "zstd"
	case ".gz":
		tool = "gzip"
	default:
		return nil, fmt.Errorf("kernel module %s: unknown compression", path)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, tool, "-dc", path)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var notFound *exec.Error
		if errors.As(err, &notFound) {
			return nil, fmt.Errorf("decompress kernel module %s: %w (install %s)", path, err, tool)
		}
		return nil, fmt.Errorf("decompress kernel module %s: %w: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
