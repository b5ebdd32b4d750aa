// Command cnigate is a CNI plugin for tests that hold a runtime hook on
// purpose. Its ADD opens a FIFO for reading, which blocks until a writer
// has it open, then passes the previous plugin's result on. The FIFO is
// the file its config names ("gate") beside the plugin's executable: a
// name, not a path, which a claim's own config may not carry. A test keeps
// the gate shut by not opening the FIFO, finds an ADD waiting as a cnigate
// process with CNI_COMMAND=ADD in its environment, does what it wants
// (kill the daemon that runs it, restart the runtime), and opens the gate
// by opening the FIFO for writing: every ADD then passes until it closes
// it. DEL, CHECK, GC and STATUS succeed at once.
//
// It is built statically: the daemon's image has no shell or libc to run
// a script plugin with.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// conf is the part of the plugin's network config it reads.
type conf struct {
	CNIVersion string          `json:"cniVersion"`
	Gate       string          `json:"gate"`
	PrevResult json.RawMessage `json:"prevResult"`
}

func main() {
	if err := run(os.Getenv("CNI_COMMAND"), os.Stdin, os.Stdout); err != nil {
		// The CNI error format: libcni shows msg to the caller.
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"cniVersion": "1.0.0", "code": 999, "msg": err.Error()})
		os.Exit(1)
	}
}

func run(command string, stdin io.Reader, stdout io.Writer) error {
	switch command {
	case "VERSION":
		_, err := io.WriteString(stdout, `{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}`)
		return err
	case "ADD":
	case "DEL", "CHECK", "GC", "STATUS":
		return nil
	default:
		return fmt.Errorf("cnigate: unknown CNI_COMMAND %q", command)
	}
	var c conf
	if err := json.NewDecoder(stdin).Decode(&c); err != nil {
		return fmt.Errorf("cnigate: network config: %w", err)
	}
	if c.Gate == "" || filepath.Base(c.Gate) != c.Gate {
		return fmt.Errorf(`cnigate: "gate" %q is not the name of a file beside the plugin`, c.Gate)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cnigate: %w", err)
	}
	// Blocks in the kernel until the test opens the other end.
	f, err := os.OpenFile(filepath.Join(filepath.Dir(self), c.Gate), os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("cnigate: %w", err)
	}
	_ = f.Close()
	if len(c.PrevResult) > 0 {
		_, err := stdout.Write(c.PrevResult)
		return err
	}
	_, err = fmt.Fprintf(stdout, `{"cniVersion":%q}`, c.CNIVersion)
	return err
}
