package main

import (
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/fastpath-dra/fastpath/test/images"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	binary := fs.String("binary", "bin/fastpathd", "the fastpathd binary: static (CGO_ENABLED=0)")
	pciIDs := fs.String("pci-ids", "/usr/share/misc/pci.ids", "the PCI ID database (Debian package pci.ids)")
	tag := fs.String("tag", "fastpath.local/fastpathd:dev", "the image's name")
	out := fs.String("o", "bin/fastpathd-image.tar", "the OCI archive to write")
	version := fs.String("version", "", "the version label")
	revision := fs.String("revision", "", "the revision label: the commit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bin, err := os.ReadFile(*binary)
	if err != nil {
		return err
	}
	arch, err := staticArch(*binary)
	if err != nil {
		return err
	}
	ids, err := os.ReadFile(*pciIDs)
	if err != nil {
		return fmt.Errorf("%w (install the pci.ids package: make deps)", err)
	}
	created := time.Unix(0, 0)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		created = time.Unix(sec, 0)
	}
	img := images.Fastpathd{Tags: []string{*tag}, Binary: bin, PCIIDs: ids, Arch: arch,
		Created: created, Version: *version, Revision: *revision}.Image()
	a, err := images.WriteOCIArchive(*out, img)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s %s (%.1f MiB compressed)\n", *out, *tag, a.Digest, float64(a.Size)/(1<<20))
	return nil
}

// staticArch returns the GOARCH of a statically linked ELF executable and
// refuses a dynamically linked one: the image has no libc.
func staticArch(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked; the image has no libc: build it with CGO_ENABLED=0 (make build)", path)
		}
	}
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64", nil
	case elf.EM_AARCH64:
		return "arm64", nil
	}
	return "", errors.New(path + ": unsupported machine " + f.Machine.String())
}
