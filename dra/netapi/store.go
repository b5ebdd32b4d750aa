package netapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

// storeVersion is the version of the state file's format.
const storeVersion = 1

// storeFile is the state file: the networks set through the API, each as
// the protobuf JSON of its NetworkConfig.
type storeFile struct {
	Version  int               `json:"version"`
	Networks []json.RawMessage `json:"networks"`
}

// loadNetworks reads the state file; a missing file is no network.
func loadNetworks(path string) ([]*NetworkConfig, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the networks set through the CRI Network API: %w", err)
	}
	var f storeFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if f.Version != storeVersion {
		return nil, fmt.Errorf("%s: version %d, this fastpathd reads %d", path, f.Version, storeVersion)
	}
	out := make([]*NetworkConfig, 0, len(f.Networks))
	for i, raw := range f.Networks {
		cfg := &NetworkConfig{}
		if err := protojson.Unmarshal(raw, cfg); err != nil {
			return nil, fmt.Errorf("%s: networks[%d]: %w", path, i, err)
		}
		out = append(out, cfg)
	}
	return out, nil
}

// saveNetworks writes the state file atomically, in name order; with no
// network it removes the file and its directory if empty, so that a node
// without networks keeps no trace of them.
func saveNetworks(path string, networks []*NetworkConfig) error {
	if len(networks) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		_ = os.Remove(filepath.Dir(path)) // only if empty
		return nil
	}
	sort.Slice(networks, func(i, j int) bool { return networks[i].GetMetadata().GetName() < networks[j].GetMetadata().GetName() })
	f := storeFile{Version: storeVersion}
	for _, cfg := range networks {
		raw, err := protojson.Marshal(cfg)
		if err != nil {
			return err
		}
		f.Networks = append(f.Networks, raw)
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return claims.WriteFileAtomic(path, data, 0o600)
}
