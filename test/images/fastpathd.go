package images

import "time"

// PCIIDsPath is where the fastpathd image holds the PCI ID database, where
// Debian's pci.ids package puts it and where discovery looks for it.
const PCIIDsPath = "usr/share/misc/pci.ids"

// Fastpathd describes the fastpathd image: the static binary and the PCI ID
// database, nothing else. The daemon needs no shell, libc or certificates
// (it reaches the API server with the service account's CA).
type Fastpathd struct {
	Tags     []string // e.g. fastpath.local/fastpathd:v0.1.0
	Binary   []byte   // a static fastpathd (CGO_ENABLED=0)
	PCIIDs   []byte   // pci.ids
	Arch     string   // GOARCH of Binary; default amd64
	Created  time.Time
	Version  string // org.opencontainers.image.version
	Revision string // org.opencontainers.image.revision: the commit
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
