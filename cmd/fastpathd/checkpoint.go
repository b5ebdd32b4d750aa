package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

const checkpointUsage = `Usage:
  fastpathd checkpoint migrate --to N [--state-dir DIR]

Rewrite the node's checkpoint (DIR/checkpoint.json) in version N, for a
fastpathd that reads only that version: a rollback to an earlier release
whose daemon refuses this one's checkpoint (it says so). Version 3 is the
checkpoint and its journal (DIR/checkpoint.json.journal); version 2, which
v0.1.0 reads, the journal folded into the checkpoint. Stop the daemon on
the node first (a rollback's new pod does not start until the checkpoint
is converted); the command takes the checkpoint's lock, and writes nothing
when a claim on the node is recorded with what version N cannot hold,
naming each such claim.
`

// checkpointCommand is fastpathd checkpoint.
func checkpointCommand(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, checkpointUsage)
		return usagef("checkpoint: want migrate")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, checkpointUsage)
		return nil
	case "migrate":
	default:
		return usagef("checkpoint: unknown %q: want migrate", args[0])
	}
	fs := flag.NewFlagSet("fastpathd checkpoint migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, checkpointUsage+"\nFlags:\n"); fs.PrintDefaults() }
	stateDir := fs.String("state-dir", "/var/lib/fastpath", "the daemon's --state-dir")
	to := fs.String("to", "", fmt.Sprintf("the version to write: one of %v (this fastpathd's is %d)", claims.Versions, claims.Version))
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("checkpoint migrate: unexpected arguments %q", fs.Args())
	}
	n, err := strconv.Atoi(*to)
	if err != nil {
		return usagef("checkpoint migrate: --to %q: want a version, one of %v", *to, claims.Versions)
	}
	path := filepath.Join(*stateDir, "checkpoint.json")
	if err := claims.Convert(path, checkpointLegacy(*stateDir), n); err != nil {
		return fmt.Errorf("checkpoint migrate: %w", err)
	}
	fmt.Fprintf(stdout, "%s: version %d\n", path, n)
	return nil
}

// checkpointLegacy names the files of the release before checkpoint
// version 2 in the daemon's state directory.
func checkpointLegacy(stateDir string) claims.Legacy {
	return claims.Legacy{CNI: filepath.Join(stateDir, "cni", "cni-checkpoint.json")}
}
