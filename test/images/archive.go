package images

import (
	"archive/tar"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// File is one file or directory of an image's single layer.
type File struct {
	Path string // inside the image, without leading slash
	Data []byte
	Mode int64
	Dir  bool // a directory: Data is ignored
}

// Image is a single-layer linux image.
type Image struct {
	Tags       []string // e.g. fastpath.local/workload:dev
	Entrypoint []string
	Files      []File
	// Architecture is the GOARCH the binaries are built for; default amd64.
	Architecture string
	// Created is the image's creation time and every file's modification
	// time; the zero value means the Unix epoch. Fixed, so the same
	// content always gives the same image.
	Created time.Time
	// Labels are the image config's labels (org.opencontainers.image.*).
	Labels map[string]string
}

func (img Image) arch() string { return cmp.Or(img.Architecture, "amd64") }

func (img Image) created() time.Time {
	if img.Created.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return img.Created.UTC().Truncate(time.Second)
}

// configJSON is the image config (the OCI and docker formats share it) for
// a layer whose uncompressed digest is diffID.
func (img Image) configJSON(diffID string) ([]byte, error) {
	type execConfig struct {
		Entrypoint []string          `json:"Entrypoint,omitempty"`
		Labels     map[string]string `json:"Labels,omitempty"`
	}
	return json.Marshal(struct {
		Created      string     `json:"created"`
		Architecture string     `json:"architecture"`
		OS           string     `json:"os"`
		Config       execConfig `json:"config"`
		RootFS       struct {
			Type    string   `json:"type"`
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}{
		Created:      img.created().Format(time.RFC3339),
		Architecture: img.arch(),
		OS:           "linux",
		Config:       execConfig{Entrypoint: img.Entrypoint, Labels: img.Labels},
		RootFS: struct {
			Type    string   `json:"type"`
			DiffIDs []string `json:"diff_ids"`
		}{Type: "layers", DiffIDs: []string{diffID}},
	})
}

// WriteArchive writes img as a docker-archive tar at path.
func WriteArchive(path string, img Image) error {
	layer, err := tarFiles(img.Files, img.created())
	if err != nil {
		return fmt.Errorf("build layer: %w", err)
	}
	layerSum := sha256.Sum256(layer)
	layerID := hex.EncodeToString(layerSum[:])
	config, err := img.configJSON("sha256:" + layerID)
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   configName,
		"RepoTags": img.Tags,
		"Layers":   []string{layerID + "/layer.tar"},
	}})
	if err != nil {
		return err
	}
	archive, err := tarFiles([]File{
		{Path: layerID + "/layer.tar", Data: layer, Mode: 0o644},
		{Path: configName, Data: config, Mode: 0o644},
		{Path: "manifest.json", Data: manifest, Mode: 0o644},
	}, img.created())
	if err != nil {
		return err
	}
	return os.WriteFile(path, archive, 0o644)
}

// tarFiles writes files as a tar in path order, owned by root, with
// mtime: the same files always give the same bytes.
func tarFiles(files []File, mtime time.Time) ([]byte, error) {
	files = slices.Clone(files)
	slices.SortStableFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{Name: f.Path, Mode: f.Mode, Size: int64(len(f.Data)), Typeflag: tar.TypeReg, ModTime: mtime}
		if f.Dir {
			hdr.Name = strings.TrimSuffix(f.Path, "/") + "/"
			hdr.Typeflag, hdr.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.Path, err)
		}
		if !f.Dir {
			if _, err := tw.Write(f.Data); err != nil {
				return nil, fmt.Errorf("tar %s: %w", f.Path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// untar reads the regular files of a tar by name.
func untar(data []byte) (map[string][]byte, error) {
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		out[hdr.Name] = b
	}
}
