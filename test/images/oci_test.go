package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func testFastpathd(arch string) Fastpathd {
	return Fastpathd{
		Tags: []string{"fastpath.local/fastpathd:v1"}, Binary: []byte("\x7fELF fastpathd " + arch), PCIIDs: []byte("8086  Intel Corporation\n"),
		Arch: arch, Created: time.Unix(1700000000, 0), Version: "v1", Revision: "ab81f10", PCIIDsVersion: "0.0~2023.04.11-1",
	}
}

// testImages are the fastpathd images of amd64 and arm64.
func testImages() []Image {
	return []Image{testFastpathd("amd64").Image(), testFastpathd("arm64").Image()}
}

// TestWriteOCIArchive: the archive is an OCI layout whose index.json names
// an image index for containerd, whose index lists one manifest per
// platform, whose manifests' configs and layers are blobs with their
// digests, each config of its own architecture, and whose layers hold
// exactly each image's files.
func TestWriteOCIArchive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img.tar")
	a, err := WriteOCIArchive(path, testImages()...)
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
	layout, err := ReadOCIIndex(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(layout.Manifests) != 1 {
		t.Fatalf("index.json = %+v, want one image", layout)
	}
	id := layout.Manifests[0]
	if id.Digest != a.Digest || id.MediaType != MediaTypeIndex || id.Platform != nil ||
		id.Annotations[AnnotationImageName] != "fastpath.local/fastpathd:v1" || id.Annotations[AnnotationRefName] != "v1" {
		t.Errorf("index.json's entry = %+v, want the image index %s named fastpath.local/fastpathd:v1", id, a.Digest)
	}
	var idx Index
	if err := json.Unmarshal(blob(id), &idx); err != nil {
		t.Fatal(err)
	}
	if idx.SchemaVersion != 2 || idx.MediaType != MediaTypeIndex || len(idx.Manifests) != 2 || len(a.Manifests) != 2 {
		t.Fatalf("image index = %+v, archive = %+v, want two manifests", idx, a)
	}
	if idx.Annotations[LabelPCIIDsVersion] != "0.0~2023.04.11-1" || idx.Annotations["org.opencontainers.image.revision"] != "ab81f10" {
		t.Errorf("image index annotations = %v, want the images' labels", idx.Annotations)
	}
	for i, arch := range []string{"amd64", "arm64"} {
		md := idx.Manifests[i]
		if md.MediaType != MediaTypeManifest || md.Platform == nil || *md.Platform != (Platform{Architecture: arch, OS: "linux"}) ||
			md.Annotations != nil || a.Manifests[i].Digest != md.Digest || a.Manifests[i].Platform != *md.Platform {
			t.Errorf("manifest %d = %+v (archive: %+v), want linux/%s", i, md, a.Manifests[i], arch)
			continue
		}
		var m manifest
		if err := json.Unmarshal(blob(md), &m); err != nil {
			t.Fatal(err)
		}
		if m.SchemaVersion != 2 || m.Config.MediaType != MediaTypeConfig || len(m.Layers) != 1 || m.Layers[0].MediaType != MediaTypeLayer {
			t.Fatalf("manifest = %+v", m)
		}
		if a.Manifests[i].Size != m.Config.Size+m.Layers[0].Size {
			t.Errorf("linux/%s size = %d, want config and layer, %d", arch, a.Manifests[i].Size, m.Config.Size+m.Layers[0].Size)
		}
		zr, err := gzip.NewReader(bytes.NewReader(blob(m.Layers[0])))
		if err != nil {
			t.Fatal(err)
		}
		layer, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		var config ImageConfig
		if err := json.Unmarshal(blob(m.Config), &config); err != nil {
			t.Fatal(err)
		}
		if len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != digest(layer) {
			t.Errorf("diff_ids = %v, want [%s]", config.RootFS.DiffIDs, digest(layer))
		}
		if config.Architecture != arch || config.OS != "linux" || config.Created != "2023-11-14T22:13:20Z" ||
			strings.Join(config.Config.Entrypoint, " ") != "/fastpathd" ||
			config.Config.Labels["org.opencontainers.image.revision"] != "ab81f10" || config.Config.Labels[LabelPCIIDsVersion] != "0.0~2023.04.11-1" {
			t.Errorf("linux/%s config = %+v", arch, config)
		}
		got, err := untar(layer)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || string(got["fastpathd"]) != "\x7fELF fastpathd "+arch || string(got[PCIIDsPath]) != "8086  Intel Corporation\n" {
			t.Errorf("linux/%s layer files = %v, want its fastpathd and %s only", arch, keys(got), PCIIDsPath)
		}
	}
}

// TestReadOCIArchive: what WriteOCIArchive writes reads back, each
// platform's image with its config and files; a blob that is not what its
// digest says is refused.
func TestReadOCIArchive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img.tar")
	a, err := WriteOCIArchive(path, testImages()...)
	if err != nil {
		t.Fatal(err)
	}
	idx, imgs, err := ReadOCIArchive(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 2 || len(imgs) != 2 {
		t.Fatalf("index = %+v, %d images, want two", idx, len(imgs))
	}
	for i, img := range imgs {
		arch := []string{"amd64", "arm64"}[i]
		if img.Platform.Architecture != arch || img.Config.Architecture != arch || img.Digest != a.Manifests[i].Digest ||
			string(img.Files["fastpathd"]) != "\x7fELF fastpathd "+arch {
			t.Errorf("image %d = %+v %s, config of %s, fastpathd %q; want linux/%s", i, img.Platform, img.Digest,
				img.Config.Architecture, img.Files["fastpathd"], arch)
		}
	}

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files := readTar(t, data)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, content := range files {
		if strings.HasSuffix(name, "/") {
			continue
		}
		if strings.HasSuffix(name, strings.TrimPrefix(a.Manifests[1].Digest, "sha256:")) {
			content = append(slices.Clone(content), ' ')
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(content); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadOCIArchive(path); err == nil || !strings.Contains(err.Error(), a.Manifests[1].Digest) {
		t.Errorf("a changed arm64 manifest: err = %v, want one naming %s", err, a.Manifests[1].Digest)
	}
}

// TestWriteOCIArchiveRefuses: images of one architecture twice, or with
// different tags, make no archive.
func TestWriteOCIArchiveRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img.tar")
	other := testFastpathd("arm64")
	other.Tags = []string{"fastpath.local/fastpathd:v2"}
	for name, imgs := range map[string][]Image{
		"none":           nil,
		"twice amd64":    {testFastpathd("amd64").Image(), testFastpathd("amd64").Image()},
		"different tags": {testFastpathd("amd64").Image(), other.Image()},
	} {
		if _, err := WriteOCIArchive(path, imgs...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestWriteOCIArchiveReproducible: the same images give the same bytes,
// whenever and wherever they are written; any change of content changes
// the index's digest and the changed platform's, not the other's.
func TestWriteOCIArchiveReproducible(t *testing.T) {
	write := func(imgs ...Image) (OCIArchive, []byte) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "img.tar")
		a, err := WriteOCIArchive(path, imgs...)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return a, data
	}
	a1, d1 := write(testImages()...)
	a2, d2 := write(testImages()...)
	if a1.Digest != a2.Digest || !bytes.Equal(d1, d2) {
		t.Errorf("two writes of one image differ: %s and %s", a1.Digest, a2.Digest)
	}
	changed := testFastpathd("arm64")
	changed.Binary = append(changed.Binary, '!')
	a3, _ := write(testFastpathd("amd64").Image(), changed.Image())
	if a3.Digest == a1.Digest || a3.Manifests[1].Digest == a1.Manifests[1].Digest {
		t.Errorf("a changed arm64 binary kept the digests %s, %s", a1.Digest, a1.Manifests[1].Digest)
	}
	if a3.Manifests[0].Digest != a1.Manifests[0].Digest {
		t.Errorf("a changed arm64 binary changed the amd64 manifest: %s, was %s", a3.Manifests[0].Digest, a1.Manifests[0].Digest)
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
