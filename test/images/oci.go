package images

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Media types of the OCI image specification v1.1.
const (
	MediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Annotations of an image in an index: containerd names the image it
// imports after the first, other OCI tools after the second.
const (
	AnnotationImageName = "io.containerd.image.name"
	AnnotationRefName   = "org.opencontainers.image.ref.name"
)

// Descriptor points at a blob of an OCI image layout.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *Platform         `json:"platform,omitempty"`
}

// Platform is the platform of an image manifest in an index.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        Descriptor   `json:"config"`
	Layers        []Descriptor `json:"layers"`
}

// Index is the index.json of an OCI image layout.
type Index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []Descriptor `json:"manifests"`
}

// OCIArchive is an image written as an OCI image layout in a tar.
type OCIArchive struct {
	// Digest is the image manifest's digest: what identifies the image in
	// a registry or a runtime (sha256:...).
	Digest string
	// Size is the image's size: its config and its compressed layer.
	Size int64
}

// WriteOCIArchive writes img as an OCI image layout in a tar at path (what
// `ctr images import`, skopeo's oci-archive: and podman read), one manifest
// per tag in the index. The layer is gzip-compressed, every timestamp is
// img.Created: the same image gives the same bytes and the same digest.
func WriteOCIArchive(path string, img Image) (OCIArchive, error) {
	if len(img.Tags) == 0 {
		return OCIArchive{}, errors.New("an OCI archive needs at least one tag to name the image")
	}
	layer, err := tarFiles(img.Files, img.created())
	if err != nil {
		return OCIArchive{}, fmt.Errorf("build layer: %w", err)
	}
	diffID := digest(layer)
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return OCIArchive{}, err
	}
	// The gzip header carries no name and a zero time: reproducible.
	if _, err := zw.Write(layer); err != nil {
		return OCIArchive{}, fmt.Errorf("compress layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return OCIArchive{}, fmt.Errorf("compress layer: %w", err)
	}
	config, err := img.configJSON(diffID)
	if err != nil {
		return OCIArchive{}, err
	}
	blobs := map[string][]byte{}
	blob := func(mediaType string, data []byte) Descriptor {
		d := digest(data)
		blobs[d] = data
		return Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}
	}
	m, err := json.Marshal(manifest{
		SchemaVersion: 2, MediaType: MediaTypeManifest,
		Config: blob(MediaTypeConfig, config),
		Layers: []Descriptor{blob(MediaTypeLayer, gz.Bytes())},
	})
	if err != nil {
		return OCIArchive{}, err
	}
	md := blob(MediaTypeManifest, m)
	index := Index{SchemaVersion: 2, MediaType: MediaTypeIndex}
	for _, tag := range img.Tags {
		d := md
		d.Platform = &Platform{Architecture: img.arch(), OS: "linux"}
		d.Annotations = map[string]string{AnnotationImageName: tag, AnnotationRefName: refName(tag)}
		index.Manifests = append(index.Manifests, d)
	}
	idx, err := json.Marshal(index)
	if err != nil {
		return OCIArchive{}, err
	}
	files := []File{
		{Path: "oci-layout", Data: []byte(`{"imageLayoutVersion":"1.0.0"}`), Mode: 0o644},
		{Path: "index.json", Data: idx, Mode: 0o644},
		{Path: "blobs", Dir: true, Mode: 0o755},
		{Path: "blobs/sha256", Dir: true, Mode: 0o755},
	}
	for d, data := range blobs {
		files = append(files, File{Path: "blobs/sha256/" + d[len("sha256:"):], Data: data, Mode: 0o644})
	}
	archive, err := tarFiles(files, img.created())
	if err != nil {
		return OCIArchive{}, err
	}
	if err := os.WriteFile(path, archive, 0o644); err != nil {
		return OCIArchive{}, err
	}
	return OCIArchive{Digest: md.Digest, Size: int64(len(config) + gz.Len())}, nil
}

// ReadOCIIndex reads the index.json of an OCI archive written by
// WriteOCIArchive.
func ReadOCIIndex(path string) (Index, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Index{}, err
	}
	files, err := untar(data)
	if err != nil {
		return Index{}, fmt.Errorf("%s: %w", path, err)
	}
	var idx Index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		return Index{}, fmt.Errorf("%s: index.json: %w", filepath.Base(path), err)
	}
	return idx, nil
}

// refName is the tag of a reference (fastpath.local/fastpathd:v1 -> v1),
// as the OCI layout's ref.name annotation holds it.
func refName(ref string) string {
	for i := len(ref) - 1; i >= 0; i-- {
		switch ref[i] {
		case ':':
			return ref[i+1:]
		case '/':
			return ref
		}
	}
	return ref
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}
