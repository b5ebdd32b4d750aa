package main

import (
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fastpath-dra/fastpath/test/images"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "build:", err)
		os.Exit(1)
	}
}

// binaries is the repeatable -binary flag.
type binaries []string

func (b *binaries) String() string { return strings.Join(*b, ",") }

func (b *binaries) Set(path string) error {
	*b = append(*b, path)
	return nil
}

func run(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	var bins binaries
	fs.Var(&bins, "binary", "a fastpathd binary, static (CGO_ENABLED=0); once per architecture (default bin/fastpathd)")
	pciIDs := fs.String("pci-ids", "/usr/share/misc/pci.ids", "the PCI ID database (Debian package pci.ids)")
	pciIDsVersion := fs.String("pci-ids-version", "", "the version of the Debian pci.ids package -pci-ids comes from, recorded in the image")
	tag := fs.String("tag", "fastpath.local/fastpathd:dev", "the image's name")
	out := fs.String("o", "bin/fastpathd-image.tar", "the OCI archive to write")
	version := fs.String("version", "", "the version label")
	revision := fs.String("revision", "", "the revision label: the commit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(bins) == 0 {
		bins = binaries{"bin/fastpathd"}
	}
	ids, err := os.ReadFile(*pciIDs)
	if err != nil {
		return fmt.Errorf("%w (test/deps.sh image fetches the pinned pci.ids package)", err)
	}
	created := time.Unix(0, 0)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
		}
		created = time.Unix(sec, 0)
	}
	var imgs []images.Image
	for _, path := range bins {
		bin, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		arch, err := staticArch(path)
		if err != nil {
			return err
		}
		imgs = append(imgs, images.Fastpathd{Tags: []string{*tag}, Binary: bin, PCIIDs: ids, Arch: arch,
			Created: created, Version: *version, Revision: *revision, PCIIDsVersion: *pciIDsVersion}.Image())
	}
	// The index lists the platforms in one order, whatever the flags'.
	slices.SortFunc(imgs, func(a, b images.Image) int { return strings.Compare(a.Architecture, b.Architecture) })
	a, err := images.WriteOCIArchive(*out, imgs...)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s index %s\n", *out, *tag, a.Digest)
	for _, m := range a.Manifests {
		fmt.Printf("%s: %s/%s manifest %s (%.1f MiB compressed)\n", *out, m.Platform.OS, m.Platform.Architecture,
			m.Digest, float64(m.Size)/(1<<20))
	}
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
