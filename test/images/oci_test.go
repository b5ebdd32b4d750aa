package images

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testFastpathd() Fastpathd {
	return Fastpathd{
		Tags: []string{"fastpath.local/fastpathd:v1"}, Binary: []byte("\x7fELF fastpathd"), PCIIDs: []byte("8086  Intel Corporation\n"),
		Created: time.Unix(1700000000, 0), Version: "v1", Revision: "ab81f10",
	}
}

// TestWriteOCIArchive: the archive is an OCI layout whose index names the
// image for containerd, whose manifest's config and layer are blobs with
// their digests, and whose layer holds exactly the image's files.
func TestWriteOCIArchive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img.tar")
	a, err := WriteOCIArchive(path, testFastpathd().Image())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files := readTar(t, data)
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", files["oci-layout"])
	}
	blob := func(d Descriptor) []byte {
		t.Helper()
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		if !ok {
			t.Fatalf("no blob %s", d.Digest)
		}
		if digest(b) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("blob %s: digest %s, size %d, want size %d", d.Digest, digest(b), len(b), d.Size)
		}
		return b
	}
	idx, err := ReadOCIIndex(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 1 {
		t.Fatalf("index = %+v", idx)
	}
	md := idx.Manifests[0]
	if md.Digest != a.Digest || md.MediaType != MediaTypeManifest || md.Platform == nil || md.Platform.Architecture != "amd64" ||
		md.Annotations[AnnotationImageName] != "fastpath.local/fastpathd:v1" || md.Annotations[AnnotationRefName] != "v1" {
		t.Errorf("index entry = %+v, want the manifest %s named fastpath.local/fastpathd:v1", md, a.Digest)
	}
	var m manifest
	if err := json.Unmarshal(blob(md), &m); err != nil {
		t.Fatal(err)
	}
	if m.SchemaVersion != 2 || m.Config.MediaType != MediaTypeConfig || len(m.Layers) != 1 || m.Layers[0].MediaType != MediaTypeLayer {
		t.Fatalf("manifest = %+v", m)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(m.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var config struct {
		Created string `json:"created"`
		Config  struct {
			Entrypoint []string
			Labels     map[string]string
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blob(m.Config), &config); err != nil {
		t.Fatal(err)
	}
	if len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != digest(layer) {
		t.Errorf("diff_ids = %v, want [%s]", config.RootFS.DiffIDs, digest(layer))
	}
	if config.Created != "2023-11-14T22:13:20Z" || strings.Join(config.Config.Entrypoint, " ") != "/fastpathd" ||
		config.Config.Labels["org.opencontainers.image.revision"] != "ab81f10" {
		t.Errorf("config = %+v", config)
	}
	got, err := untar(layer)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got["fastpathd"]) != "\x7fELF fastpathd" || string(got[PCIIDsPath]) != "8086  Intel Corporation\n" {
		t.Errorf("layer files = %v, want fastpathd and %s only", keys(got), PCIIDsPath)
	}
}

// TestWriteOCIArchiveReproducible: the same image gives the same bytes,
// whenever and wherever it is written; any change of content changes the
// digest.
func TestWriteOCIArchiveReproducible(t *testing.T) {
	write := func(f Fastpathd) (OCIArchive, []byte) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "img.tar")
		a, err := WriteOCIArchive(path, f.Image())
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return a, data
	}
	a1, d1 := write(testFastpathd())
	a2, d2 := write(testFastpathd())
	if a1.Digest != a2.Digest || !bytes.Equal(d1, d2) {
		t.Errorf("two writes of one image differ: %s and %s", a1.Digest, a2.Digest)
	}
	changed := testFastpathd()
	changed.Binary = append(changed.Binary, '!')
	if a3, _ := write(changed); a3.Digest == a1.Digest {
		t.Errorf("a changed binary kept the digest %s", a1.Digest)
	}
}

func TestRefName(t *testing.T) {
	for ref, want := range map[string]string{
		"fastpath.local/fastpathd:v1": "v1", "localhost:5000/fastpathd": "localhost:5000/fastpathd", "fastpathd:dev": "dev", "fastpathd": "fastpathd",
	} {
		if got := refName(ref); got != want {
			t.Errorf("refName(%q) = %q, want %q", ref, got, want)
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
