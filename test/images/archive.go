package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// File is one file of an image's single layer.
type File struct {
	Path string // inside the image, without leading slash
	Data []byte
	Mode int64
}

// Image is a single-layer linux/amd64 image.
type Image struct {
	Tags       []string // e.g. fastpath.local/workload:dev
	Entrypoint []string
	Files      []File
}

// WriteArchive writes img as a docker-archive tar at path.
func WriteArchive(path string, img Image) error {
	layer, err := tarFiles(img.Files)
	if err != nil {
		return fmt.Errorf("build layer: %w", err)
	}
	layerSum := sha256.Sum256(layer)
	layerID := hex.EncodeToString(layerSum[:])
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      time.Unix(0, 0).UTC().Format(time.RFC3339),
		"config":       map[string]any{"Entrypoint": img.Entrypoint},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerID}},
	})
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
	})
	if err != nil {
		return err
	}
	return os.WriteFile(path, archive, 0o644)
}

func tarFiles(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{Name: f.Path, Mode: f.Mode, Size: int64(len(f.Data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
