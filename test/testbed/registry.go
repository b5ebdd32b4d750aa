package testbed

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/fastpath-dra/fastpath/test/images"
)

// The CRI-O node's images. CRI-O has no import: it pulls every image it
// runs. So the bed serves the OCI archives it would import into
// containerd from a registry of its own, read-only, on 127.0.0.1
// (cmd/registry), and CRI-O's registries.conf sends the images of
// fastpath.local there. An archive is added by unpacking its blobs into
// the registry's directory and writing its tags; the runtime is then told
// to pull them, so that a tag that moved is pulled again, as
// `ctr images import` replaces it.
//
// The registry's directory:
//
//	blobs/sha256/<hex>   every blob of every archive added
//	tags/<repo>/<tag>    the descriptor (JSON) a tag names

// registryDomain is the domain of the bed's images: registries.conf maps
// it to the registry.
const registryDomain = "fastpath.local"

// addToRegistry unpacks an OCI archive written by images.WriteOCIArchive
// into the registry's directory and returns the names of the images it
// tags.
func addToRegistry(dir, archive string) ([]string, error) {
	files, err := images.ReadOCILayout(archive)
	if err != nil {
		return nil, err
	}
	var layout images.Index
	if err := json.Unmarshal(files["index.json"], &layout); err != nil {
		return nil, fmt.Errorf("%s: index.json: %w", archive, err)
	}
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	for name, data := range files {
		hex, ok := strings.CutPrefix(name, "blobs/sha256/")
		if !ok {
			continue
		}
		if err := writeAtomic(filepath.Join(blobs, hex), data); err != nil {
			return nil, err
		}
	}
	var names []string
	for _, d := range layout.Manifests {
		name := d.Annotations[images.AnnotationImageName]
		repo, tag, err := splitImageName(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", archive, err)
		}
		desc, err := json.Marshal(images.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size})
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Join(dir, "tags", repo), 0o755); err != nil {
			return nil, err
		}
		if err := writeAtomic(filepath.Join(dir, "tags", repo, tag), desc); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s names no image", archive)
	}
	return names, nil
}

// tagInRegistry gives the image the registry holds as image the name name
// too.
func tagInRegistry(dir, image, name string) error {
	repo, tag, err := splitImageName(image)
	if err != nil {
		return err
	}
	desc, err := os.ReadFile(filepath.Join(dir, "tags", repo, tag))
	if err != nil {
		return fmt.Errorf("image %s is not in the bed's registry: %w", image, err)
	}
	if repo, tag, err = splitImageName(name); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "tags", repo), 0o755); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, "tags", repo, tag), desc)
}

// splitImageName splits fastpath.local/REPO:TAG.
func splitImageName(name string) (repo, tag string, _ error) {
	rest, ok := strings.CutPrefix(name, registryDomain+"/")
	if ok {
		repo, tag, ok = strings.Cut(rest, ":")
	}
	if !ok || repo == "" || tag == "" || strings.Contains(repo, "..") || strings.ContainsAny(tag, "/:") {
		return "", "", fmt.Errorf("image name %q is not %s/REPO:TAG", name, registryDomain)
	}
	return repo, tag, nil
}

func writeAtomic(path string, data []byte) error {
	tmp := fmt.Sprintf("%s.tmp%d", path, os.Getpid())
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// RegistryHandler serves the registry's directory with the read side of
// the OCI distribution API: what a pull needs.
func RegistryHandler(dir string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "read-only", http.StatusMethodNotAllowed)
			return
		}
		path, ok := strings.CutPrefix(r.URL.Path, "/v2/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		if path == "" {
			w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
			_, _ = w.Write([]byte("{}"))
			return
		}
		if i := strings.LastIndex(path, "/blobs/"); i > 0 {
			serveBlob(w, r, dir, path[i+len("/blobs/"):], "application/octet-stream")
			return
		}
		i := strings.LastIndex(path, "/manifests/")
		if i <= 0 {
			http.NotFound(w, r)
			return
		}
		repo, ref := path[:i], path[i+len("/manifests/"):]
		if strings.HasPrefix(ref, "sha256:") {
			serveBlob(w, r, dir, ref, "")
			return
		}
		if strings.Contains(repo, "..") || strings.ContainsAny(ref, "/") {
			http.NotFound(w, r)
			return
		}
		data, err := os.ReadFile(filepath.Join(dir, "tags", repo, ref))
		if err != nil {
			manifestUnknown(w, repo+":"+ref)
			return
		}
		var d images.Descriptor
		if err := json.Unmarshal(data, &d); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		serveBlob(w, r, dir, d.Digest, d.MediaType)
	})
}

// serveBlob serves a blob by digest; an empty mediaType is the manifest's
// own (a manifest asked for by digest).
func serveBlob(w http.ResponseWriter, r *http.Request, dir, digest, mediaType string) {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hex) != 64 || strings.ContainsAny(hex, "./") {
		http.NotFound(w, r)
		return
	}
	data, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", hex))
	if errors.Is(err, os.ErrNotExist) {
		manifestUnknown(w, digest)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if mediaType == "" {
		var m struct {
			MediaType string `json:"mediaType"`
		}
		_ = json.Unmarshal(data, &m)
		mediaType = m.MediaType
	}
	w.Header().Set("Content-Type", mediaType)
	w.Header().Set("Docker-Content-Digest", digest)
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(data)
}

func manifestUnknown(w http.ResponseWriter, what string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_, _ = fmt.Fprintf(w, `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"%s is not in the bed's registry"}]}`, strings.ReplaceAll(what, `"`, ""))
}
