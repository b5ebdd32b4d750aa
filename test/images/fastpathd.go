package images

import "time"

// PCIIDsPath is where the fastpathd image holds the PCI ID database, where
// Debian's pci.ids package puts it and where discovery looks for it.
const PCIIDsPath = "usr/share/misc/pci.ids"

// LabelPCIIDsVersion is the label (and the image index's annotation) that
// records the version of the Debian pci.ids package the image's PCI ID
// database comes from.
const LabelPCIIDsVersion = "dev.fastpath.pci-ids.version"

// Fastpathd describes the fastpathd image of one architecture: the static
// binary and the PCI ID database, nothing else. The daemon needs no shell, libc or certificates
// (it reaches the API server with the service account's CA).
type Fastpathd struct {
	Tags     []string // e.g. fastpath.local/fastpathd:v0.1.0
	Binary   []byte   // a static fastpathd (CGO_ENABLED=0)
	PCIIDs   []byte   // pci.ids
	Arch     string   // GOARCH of Binary; default amd64
	Created  time.Time
	Version  string // org.opencontainers.image.version
	Revision string // org.opencontainers.image.revision: the commit
	// PCIIDsVersion is the version of the Debian pci.ids package PCIIDs
	// comes from (LabelPCIIDsVersion); "" records none.
	PCIIDsVersion string
}

// Image is the image f describes.
func (f Fastpathd) Image() Image {
	labels := map[string]string{
		"org.opencontainers.image.title":  "fastpathd",
		"org.opencontainers.image.source": "https://github.com/fastpath-dra/fastpath",
	}
	if f.Version != "" {
		labels["org.opencontainers.image.version"] = f.Version
	}
	if f.Revision != "" {
		labels["org.opencontainers.image.revision"] = f.Revision
	}
	if f.PCIIDsVersion != "" {
		labels[LabelPCIIDsVersion] = f.PCIIDsVersion
	}
	return Image{
		Tags:         f.Tags,
		Entrypoint:   []string{"/fastpathd"},
		Architecture: f.Arch,
		Created:      f.Created,
		Labels:       labels,
		Files: []File{
			{Path: "fastpathd", Data: f.Binary, Mode: 0o755},
			{Path: "usr", Dir: true, Mode: 0o755},
			{Path: "usr/share", Dir: true, Mode: 0o755},
			{Path: "usr/share/misc", Dir: true, Mode: 0o755},
			{Path: PCIIDsPath, Data: f.PCIIDs, Mode: 0o644},
		},
	}
}
