// Command cnirecord is a CNI plugin for tests that stand in for plugins
// the node does not have (the standard's "awesome-plugin", a
// "port-forwarding" plugin): installed under such a name, it records the
// network configuration each call gives it and creates nothing. Its ADD
// passes the previous plugin's result on, or, first in a chain, returns a
// result with no interface and no address. A configuration with "fail"
// naming a command (like "ADD") makes that command fail.
//
// Each call is recorded in <type>.<command>.<container ID>.<interface>.json
// in the directory "records" beside the plugin's own directory, <type>
// being the name the plugin runs under: a JSON object with the call's
// "command", "containerID", "ifName" and "args" (CNI_ARGS) and its
// "config", the JSON it read on stdin. The plugin's directory may be
// mounted read-only (a daemon runs its plugins from read-only mounts); its
// parent must be writable.
//
// It is built statically: the daemon's image has no shell or libc to run
// a script plugin with.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// conf is the part of the plugin's network config it reads.
type conf struct {
	CNIVersion string          `json:"cniVersion"`
	Fail       string          `json:"fail"`
	PrevResult json.RawMessage `json:"prevResult"`
}

func main() {
	if err := run(filepath.Base(os.Args[0]), os.Getenv("CNI_COMMAND"), os.Stdin, os.Stdout); err != nil {
		// The CNI error format: libcni shows msg to the caller.
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"cniVersion": "1.0.0", "code": 999, "msg": err.Error()})
		os.Exit(1)
	}
}

func run(name, command string, stdin io.Reader, stdout io.Writer) error {
	switch command {
	case "VERSION":
		_, err := io.WriteString(stdout, `{"cniVersion":"1.1.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}`)
		return err
	case "ADD", "DEL", "CHECK", "GC", "STATUS":
	default:
		return fmt.Errorf("%s: unknown CNI_COMMAND %q", name, command)
	}
	data, err := io.ReadAll(stdin)
	if err != nil {
		return fmt.Errorf("%s: read the network config: %w", name, err)
	}
	if err := record(name, command, data); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	var c conf
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("%s: network config: %w", name, err)
	}
	if c.Fail == command {
		return fmt.Errorf("%s: %s fails, as its configuration asks (\"fail\": %q)", name, command, c.Fail)
	}
	if command != "ADD" {
		return nil
	}
	if len(c.PrevResult) > 0 {
		_, err := stdout.Write(c.PrevResult)
		return err
	}
	_, err = fmt.Fprintf(stdout, `{"cniVersion":%q}`, c.CNIVersion)
	return err
}

// Record is what the plugin records of a call.
type Record struct {
	Command     string          `json:"command"`
	ContainerID string          `json:"containerID"`
	IfName      string          `json:"ifName"`
	Args        string          `json:"args"`
	Config      json.RawMessage `json:"config"`
}

// record writes the call to the records directory.
func record(name, command string, config []byte) error {
	if !json.Valid(config) {
		return errors.New("the network config is not JSON")
	}
	rec := Record{Command: command, ContainerID: os.Getenv("CNI_CONTAINERID"), IfName: os.Getenv("CNI_IFNAME"),
		Args: os.Getenv("CNI_ARGS"), Config: config}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir := filepath.Join(filepath.Dir(filepath.Dir(self)), "records")
	file := fmt.Sprintf("%s.%s.%s.%s.json", name, command, orDash(rec.ContainerID), orDash(rec.IfName))
	if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
		return fmt.Errorf("record the call: %w", err)
	}
	return nil
}

func orDash(s string) string {
	if s == "" || filepath.Base(s) != s {
		return "-"
	}
	return s
}
