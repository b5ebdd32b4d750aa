package testbed

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// state is what a running bed records in Dir/bed.json, so that another
// process (cluster-down, an attaching test) can find and stop exactly it.
type state struct {
	Config    Config    `json:"config"`
	Started   time.Time `json:"started"`
	Processes []process `json:"processes"`
	// CreatedPaths are host paths outside Dir that did not exist before the
	// bed started and that its components create; removed on stop.
	CreatedPaths []string `json:"createdPaths"`
}

func loadState(cfg Config) (*state, error) {
	data, err := os.ReadFile(cfg.stateFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("read %s: %w", cfg.stateFile(), err)
	}
	return &st, nil
}

// save writes the state atomically: temp file, fsync, rename.
func (st *state) save() error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	path := st.Config.stateFile()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bed-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// running returns the first recorded process that is still alive.
func (st *state) running() (process, bool) {
	for _, p := range st.Processes {
		if p.alive() {
			return p, true
		}
	}
	return process{}, false
}
