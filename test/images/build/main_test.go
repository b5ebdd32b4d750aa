package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fastpath-dra/fastpath/test/images"
)

// TestRunMultiArch: binaries cross-compiled for amd64 and arm64, as make
// image builds them, give an image index of linux/amd64 and linux/arm64
// whose images hold each its own binary, really an x86-64 and an AArch64
// executable, whose configs say their architectures, and which record
// the PCI ID database's version. Two binaries of one architecture, or a
// file that is no executable, make no image.
func TestRunMultiArch(t *testing.T) {
	dir := t.TempDir()
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	bins := map[string]string{}
	args := []string{"-tag", "fastpath.local/fastpathd:test", "-version", "test", "-pci-ids-version", "0.0~2023.04.11-1"}
	// The order of the flags is not the index's.
	for _, arch := range []string{"arm64", "amd64"} {
		bin := filepath.Join(dir, "linux-"+arch, "fastpathd")
		// Any small static program will do: the test images' workload.
		cmd := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "../workload")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build for %s: %v\n%s", arch, err, out)
		}
		args = append(args, "-binary", bin)
		bins[arch] = bin
	}
	ids := filepath.Join(dir, "pci.ids")
	if err := os.WriteFile(ids, []byte("8086  Intel Corporation\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "img.tar")
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	if err := run(append(args, "-pci-ids", ids, "-o", archive)); err != nil {
		t.Fatal(err)
	}
	idx, imgs, err := images.ReadOCIArchive(archive)
	if err != nil {
		t.Fatal(err)
	}
	if idx.Annotations[images.LabelPCIIDsVersion] != "0.0~2023.04.11-1" {
		t.Errorf("image index annotations = %v, want the pci.ids version", idx.Annotations)
	}
	if len(imgs) != 2 {
		t.Fatalf("%d images, want linux/amd64 and linux/arm64", len(imgs))
	}
	for i, arch := range []string{"amd64", "arm64"} {
		img := imgs[i]
		if img.Platform != (images.Platform{Architecture: arch, OS: "linux"}) || img.Config.Architecture != arch || img.Config.OS != "linux" {
			t.Errorf("image %d: platform %+v, config of %s/%s; want linux/%s", i, img.Platform, img.Config.OS, img.Config.Architecture, arch)
		}
		if img.Config.Created != "2023-11-14T22:13:20Z" || img.Config.Config.Labels[images.LabelPCIIDsVersion] != "0.0~2023.04.11-1" {
			t.Errorf("linux/%s config = %+v", arch, img.Config)
		}
		if string(img.Files[images.PCIIDsPath]) != "8086  Intel Corporation\n" {
			t.Errorf("linux/%s %s = %q", arch, images.PCIIDsPath, img.Files[images.PCIIDsPath])
		}
		f, err := elf.NewFile(bytes.NewReader(img.Files["fastpathd"]))
		if err != nil {
			t.Fatalf("linux/%s fastpathd: %v", arch, err)
		}
		if f.Machine != machines[arch] || f.Class != elf.ELFCLASS64 {
			t.Errorf("linux/%s fastpathd is an ELF %s %s, want %s", arch, f.Class, f.Machine, machines[arch])
		}
	}

	for name, refused := range map[string][]string{"twice amd64": {bins["amd64"], bins["amd64"]}, "not an executable": {ids}} {
		args := []string{"-pci-ids", ids, "-o", filepath.Join(dir, "refused.tar")}
		for _, b := range refused {
			args = append(args, "-binary", b)
		}
		if err := run(args); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
