package images

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// Index is an OCI image index: the index.json of an OCI image layout, or
// an image index blob listing one manifest per platform.
type Index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []Descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// OCIArchive is an image written as an OCI image layout in a tar.
type OCIArchive struct {
	// Digest is the image index's digest: what identifies the image, all
	// its platforms, in a registry or a runtime (sha256:...).
	Digest string
	// Manifests are the image's manifests, one per platform, in the
	// index's order.
	Manifests []PlatformManifest
}

// PlatformManifest is the manifest of one platform's image in an index.
type PlatformManifest struct {
	Platform Platform
	// Digest is the manifest's digest: what a runtime of this platform
	// runs (sha256:...).
	Digest string
	// Size is the platform's image size: its config and its compressed
	// layer.
	Size int64
}

// WriteOCIArchive writes imgs, one image for as many platforms, as an OCI
// image layout in a tar at path (what `ctr images import`, skopeo's
// oci-archive: and podman read). Each image is a manifest of its
// architecture; an image index lists them with their platforms and carries
// the labels all images share as annotations; the layout's index.json
// names that image index once per tag (the images' Tags, which must be the
// same). containerd imports the image index under its name and, of it,
// the content of its own platform. Layers are gzip-compressed, every
// timestamp is the first image's Created: the same images give the same
// bytes and the same digests.
func WriteOCIArchive(path string, imgs ...Image) (OCIArchive, error) {
	if len(imgs) == 0 {
		return OCIArchive{}, errors.New("an OCI archive needs at least one image")
	}
	tags := imgs[0].Tags
	if len(tags) == 0 {
		return OCIArchive{}, errors.New("an OCI archive needs at least one tag to name the image")
	}
	blobs := map[string][]byte{}
	blob := func(mediaType string, data []byte) Descriptor {
		d := digest(data)
		blobs[d] = data
		return Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}
	}
	var (
		out   OCIArchive
		index = Index{SchemaVersion: 2, MediaType: MediaTypeIndex}
		seen  = map[string]bool{}
	)
	for _, img := range imgs {
		if !slices.Equal(img.Tags, tags) {
			return OCIArchive{}, fmt.Errorf("the %s image is tagged %v, the %s image %v: one image has one set of tags",
				img.arch(), img.Tags, imgs[0].arch(), tags)
		}
		if seen[img.arch()] {
			return OCIArchive{}, fmt.Errorf("two images for linux/%s", img.arch())
		}
		seen[img.arch()] = true
		img.Created = imgs[0].created()
		config, layer, err := img.ociBlobs()
		if err != nil {
			return OCIArchive{}, err
		}
		m, err := json.Marshal(manifest{
			SchemaVersion: 2, MediaType: MediaTypeManifest,
			Config: blob(MediaTypeConfig, config),
			Layers: []Descriptor{blob(MediaTypeLayer, layer)},
		})
		if err != nil {
			return OCIArchive{}, err
		}
		md := blob(MediaTypeManifest, m)
		md.Platform = &Platform{Architecture: img.arch(), OS: "linux"}
		index.Manifests = append(index.Manifests, md)
		out.Manifests = append(out.Manifests, PlatformManifest{
			Platform: *md.Platform, Digest: md.Digest, Size: int64(len(config) + len(layer)),
		})
	}
	index.Annotations = sharedLabels(imgs)
	ib, err := json.Marshal(index)
	if err != nil {
		return OCIArchive{}, err
	}
	id := blob(MediaTypeIndex, ib)
	out.Digest = id.Digest
	layout := Index{SchemaVersion: 2, MediaType: MediaTypeIndex}
	for _, tag := range tags {
		d := id
		d.Annotations = map[string]string{AnnotationImageName: tag, AnnotationRefName: refName(tag)}
		layout.Manifests = append(layout.Manifests, d)
	}
	idx, err := json.Marshal(layout)
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
	archive, err := tarFiles(files, imgs[0].created())
	if err != nil {
		return OCIArchive{}, err
	}
	if err := os.WriteFile(path, archive, 0o644); err != nil {
		return OCIArchive{}, err
	}
	return out, nil
}

// ociBlobs are img's config and its gzip-compressed layer.
func (img Image) ociBlobs() (config, layer []byte, err error) {
	tarred, err := tarFiles(img.Files, img.created())
	if err != nil {
		return nil, nil, fmt.Errorf("build the %s layer: %w", img.arch(), err)
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
	if err != nil {
		return nil, nil, err
	}
	// The gzip header carries no name and a zero time: reproducible.
	if _, err := zw.Write(tarred); err != nil {
		return nil, nil, fmt.Errorf("compress the %s layer: %w", img.arch(), err)
	}
	if err := zw.Close(); err != nil {
		return nil, nil, fmt.Errorf("compress the %s layer: %w", img.arch(), err)
	}
	config, err = img.configJSON(digest(tarred))
	if err != nil {
		return nil, nil, err
	}
	return config, gz.Bytes(), nil
}

// sharedLabels are the labels every one of imgs has, with the same value.
func sharedLabels(imgs []Image) map[string]string {
	var shared map[string]string
	for k, v := range imgs[0].Labels {
		if !slices.ContainsFunc(imgs, func(img Image) bool { return img.Labels[k] != v }) {
			if shared == nil {
				shared = map[string]string{}
			}
			shared[k] = v
		}
	}
	return shared
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

// ReadOCILayout reads an OCI archive's files (index.json, oci-layout and
// blobs/sha256/...) by their paths in it.
func ReadOCILayout(path string) (map[string][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	files, err := untar(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return files, nil
}

// OCIImage is one platform's image of an OCI archive, read back.
type OCIImage struct {
	Platform Platform
	Digest   string // the manifest's
	Config   ImageConfig
	Files    map[string][]byte // the layer's regular files by path
}

// ImageConfig is what an image config says of its image.
type ImageConfig struct {
	Created      string `json:"created"`
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		Entrypoint []string          `json:"Entrypoint"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// ReadOCIArchive reads an OCI archive written by WriteOCIArchive back: the
// image index its index.json names first, and each of its platforms'
// images. Every blob is checked against its digest and size.
func ReadOCIArchive(path string) (Index, []OCIImage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Index{}, nil, err
	}
	files, err := untar(data)
	if err != nil {
		return Index{}, nil, fmt.Errorf("%s: %w", path, err)
	}
	blob := func(d Descriptor, v any) ([]byte, error) {
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		if !ok {
			return nil, fmt.Errorf("%s: no blob %s", path, d.Digest)
		}
		if digest(b) != d.Digest || int64(len(b)) != d.Size {
			return nil, fmt.Errorf("%s: blob %s has the digest %s and %d bytes, not %d", path, d.Digest, digest(b), len(b), d.Size)
		}
		if v != nil {
			if err := json.Unmarshal(b, v); err != nil {
				return nil, fmt.Errorf("%s: blob %s: %w", path, d.Digest, err)
			}
		}
		return b, nil
	}
	var layout, index Index
	if err := json.Unmarshal(files["index.json"], &layout); err != nil {
		return Index{}, nil, fmt.Errorf("%s: index.json: %w", path, err)
	}
	if len(layout.Manifests) == 0 || layout.Manifests[0].MediaType != MediaTypeIndex {
		return Index{}, nil, fmt.Errorf("%s: index.json names no image index", path)
	}
	if _, err := blob(layout.Manifests[0], &index); err != nil {
		return Index{}, nil, err
	}
	var imgs []OCIImage
	for _, md := range index.Manifests {
		if md.Platform == nil {
			return Index{}, nil, fmt.Errorf("%s: manifest %s has no platform", path, md.Digest)
		}
		var m manifest
		if _, err := blob(md, &m); err != nil {
			return Index{}, nil, err
		}
		img := OCIImage{Platform: *md.Platform, Digest: md.Digest}
		if _, err := blob(m.Config, &img.Config); err != nil {
			return Index{}, nil, err
		}
		if len(m.Layers) != 1 {
			return Index{}, nil, fmt.Errorf("%s: manifest %s has %d layers, not one", path, md.Digest, len(m.Layers))
		}
		gz, err := blob(m.Layers[0], nil)
		if err != nil {
			return Index{}, nil, err
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			return Index{}, nil, fmt.Errorf("%s: layer %s: %w", path, m.Layers[0].Digest, err)
		}
		layer, err := io.ReadAll(zr)
		if err != nil {
			return Index{}, nil, fmt.Errorf("%s: layer %s: %w", path, m.Layers[0].Digest, err)
		}
		if len(img.Config.RootFS.DiffIDs) != 1 || img.Config.RootFS.DiffIDs[0] != digest(layer) {
			return Index{}, nil, fmt.Errorf("%s: the config of %s names the layer %v, not %s", path, md.Digest, img.Config.RootFS.DiffIDs, digest(layer))
		}
		if img.Files, err = untar(layer); err != nil {
			return Index{}, nil, fmt.Errorf("%s: layer %s: %w", path, m.Layers[0].Digest, err)
		}
		imgs = append(imgs, img)
	}
	return index, imgs, nil
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
