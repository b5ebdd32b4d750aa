package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func readTar(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[hdr.Name] = b
	}
}

func TestWriteArchive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img.tar")
	img := Image{
		Tags:       []string{"fastpath.local/x:dev"},
		Entrypoint: []string{"/x"},
		Files:      []File{{Path: "x", Data: []byte("#!binary"), Mode: 0o755}},
	}
	if err := WriteArchive(path, img); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files := readTar(t, data)
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	if len(manifest) != 1 || len(manifest[0].Layers) != 1 || manifest[0].RepoTags[0] != "fastpath.local/x:dev" {
		t.Fatalf("manifest = %+v", manifest)
	}
	layer := files[manifest[0].Layers[0]]
	if got := readTar(t, layer)["x"]; string(got) != "#!binary" {
		t.Errorf("layer file x = %q", got)
	}
	var config struct {
		OS     string `json:"os"`
		Config struct{ Entrypoint []string }
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(files[manifest[0].Config], &config); err != nil {
		t.Fatalf("config: %v", err)
	}
	sum := sha256.Sum256(layer)
	if want := "sha256:" + hex.EncodeToString(sum[:]); len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != want {
		t.Errorf("diff_ids = %v, want [%s]", config.RootFS.DiffIDs, want)
	}
	if config.OS != "linux" || len(config.Config.Entrypoint) != 1 || config.Config.Entrypoint[0] != "/x" {
		t.Errorf("config = %+v", config)
	}
	configSum := sha256.Sum256(files[manifest[0].Config])
	if manifest[0].Config != hex.EncodeToString(configSum[:])+".json" {
		t.Errorf("config file %s is not named by its digest", manifest[0].Config)
	}
}
