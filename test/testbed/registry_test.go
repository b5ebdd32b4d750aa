package testbed

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/fastpath-dra/fastpath/test/images"
)

// The bed's registry serves what a pull of an added archive asks for: the
// tag's image index, each manifest and blob by digest, with their media
// types and digests; and nothing outside its directory.
func TestRegistry(t *testing.T) {
	dir := t.TempDir()
	archive := filepath.Join(t.TempDir(), "img.tar")
	img := images.Image{Tags: []string{"fastpath.local/workload:dev"}, Entrypoint: []string{"/workload"},
		Files: []images.File{{Path: "workload", Data: []byte("#!/bin/true\n"), Mode: 0o755}}}
	oci, err := images.WriteOCIArchive(archive, img)
	if err != nil {
		t.Fatal(err)
	}
	names, err := addToRegistry(dir, archive)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != "fastpath.local/workload:dev" {
		t.Fatalf("added %v, want the archive's one image", names)
	}
	if err := tagInRegistry(dir, "fastpath.local/workload:dev", "fastpath.local/workload:v2"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(RegistryHandler(dir))
	t.Cleanup(srv.Close)
	get := func(method, path string) (int, http.Header, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, body
	}
	if code, _, _ := get(http.MethodGet, "/v2/"); code != http.StatusOK {
		t.Errorf("GET /v2/: %d", code)
	}
	for _, tag := range []string{"dev", "v2", oci.Digest} {
		code, h, body := get(http.MethodGet, "/v2/workload/manifests/"+tag)
		if code != http.StatusOK || h.Get("Content-Type") != images.MediaTypeIndex || h.Get("Docker-Content-Digest") != oci.Digest {
			t.Fatalf("GET manifest %s: %d, %q, %q; want the image index %s", tag, code, h.Get("Content-Type"), h.Get("Docker-Content-Digest"), oci.Digest)
		}
		var idx images.Index
		if err := json.Unmarshal(body, &idx); err != nil || len(idx.Manifests) != 1 || idx.Manifests[0].Digest != oci.Manifests[0].Digest {
			t.Errorf("manifest %s: %s (%v)", tag, body, err)
		}
	}
	code, h, body := get(http.MethodGet, "/v2/workload/manifests/"+oci.Manifests[0].Digest)
	var m struct {
		Config images.Descriptor   `json:"config"`
		Layers []images.Descriptor `json:"layers"`
	}
	if code != http.StatusOK || h.Get("Content-Type") != images.MediaTypeManifest || json.Unmarshal(body, &m) != nil || len(m.Layers) != 1 {
		t.Fatalf("GET the platform's manifest: %d %q %s", code, h.Get("Content-Type"), body)
	}
	for _, d := range append(m.Layers, m.Config) {
		if code, h, body := get(http.MethodGet, "/v2/workload/blobs/"+d.Digest); code != http.StatusOK || int64(len(body)) != d.Size || h.Get("Docker-Content-Digest") != d.Digest {
			t.Errorf("GET blob %s: %d, %d bytes, want %d", d.Digest, code, len(body), d.Size)
		}
		if code, h, body := get(http.MethodHead, "/v2/workload/blobs/"+d.Digest); code != http.StatusOK || len(body) != 0 || h.Get("Content-Length") == "" {
			t.Errorf("HEAD blob %s: %d, %d bytes, length %q", d.Digest, code, len(body), h.Get("Content-Length"))
		}
	}
	for _, path := range []string{"/v2/workload/manifests/nope", "/v2/../tags/workload/manifests/dev", "/v2/workload/blobs/sha256:../../x",
		"/v2/workload/blobs/sha256:" + "0000000000000000000000000000000000000000000000000000000000000000", "/other"} {
		if code, _, _ := get(http.MethodGet, path); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
	}
	if code, _, _ := get(http.MethodPut, "/v2/workload/manifests/dev"); code != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d, want 405", code)
	}
	if _, err := addToRegistry(dir, filepath.Join(t.TempDir(), "missing.tar")); err == nil {
		t.Error("a missing archive was added")
	}
	for _, bad := range []string{"docker.io/library/busybox:1", "fastpath.local/x", "fastpath.local/../x:1"} {
		if _, _, err := splitImageName(bad); err == nil {
			t.Errorf("image name %q accepted", bad)
		}
	}
}
