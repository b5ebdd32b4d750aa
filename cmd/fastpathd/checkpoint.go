package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fastpath-dra/fastpath/dra/claims"
)

const checkpointUsage = `Usage:
  fastpathd checkpoint migrate --to N [--state-dir DIR]
  fastpathd checkpoint verify [--state-dir DIR]
  fastpathd checkpoint repair --drop CLAIM... [--state-dir DIR]

migrate rewrites the node's checkpoint (DIR/checkpoint.json) in version N,
for a fastpathd that reads only that version: a rollback to an earlier
release whose daemon refuses this one's checkpoint (it says so). Version 3
is the checkpoint and its journal (DIR/checkpoint.json.journal); version 2,
which v0.1.0 reads, the journal folded into the checkpoint. Stop the daemon
on the node first (a rollback's new pod does not start until the
checkpoint is converted); the command takes the checkpoint's lock, and
writes nothing when a claim on the node is recorded with what version N
cannot hold, naming each such claim.

verify reads the checkpoint and its journal as the daemon does, checking
each record's checksum, and lists the records held aside as corrupt, each
with its file, line and claim (driver/UID; journal/gen-G-line-N for a
journal line whose claim cannot be read); it exits 1 if there is one.
It writes nothing.

repair drops the records held aside of the claims named (as verify names
them), and writes the checkpoint again without them; a claim whose record
is not corrupt is refused. Stop the daemon on the node first, then delete
the pods of the claims dropped: their devices are set up as the record
said, and a new pod's claim is prepared afresh.
`

// checkpointCommand is fastpathd checkpoint.
func checkpointCommand(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, checkpointUsage)
		return usagef("checkpoint: want migrate, verify or repair")
	}
	verb := args[0]
	switch verb {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, checkpointUsage)
		return nil
	case "migrate", "verify", "repair":
	default:
		return usagef("checkpoint: unknown %q: want migrate, verify or repair", verb)
	}
	fs := flag.NewFlagSet("fastpathd checkpoint "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, checkpointUsage+"\nFlags:\n"); fs.PrintDefaults() }
	stateDir := fs.String("state-dir", "/var/lib/fastpath", "the daemon's --state-dir")
	var to *string
	var drop claimList
	switch verb {
	case "migrate":
		to = fs.String("to", "", fmt.Sprintf("the version to write: one of %v (this fastpathd's is %d)", claims.Versions, claims.Version))
	case "repair":
		fs.Var(&drop, "drop", "a claim whose corrupt record to drop, as verify names it (driver/UID); may be repeated")
	}
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("checkpoint %s: unexpected arguments %q", verb, fs.Args())
	}
	path := filepath.Join(*stateDir, "checkpoint.json")
	switch verb {
	case "verify":
		return checkpointVerify(path, stdout)
	case "repair":
		if len(drop) == 0 {
			return usagef("checkpoint repair: want --drop CLAIM, as checkpoint verify names it")
		}
		if err := claims.Repair(path, checkpointLegacy(*stateDir), drop); err != nil {
			return fmt.Errorf("checkpoint repair: %w", err)
		}
		fmt.Fprintf(stdout, "%s: dropped %s\n", path, strings.Join(drop, ", "))
		return nil
	}
	n, err := strconv.Atoi(*to)
	if err != nil {
		return usagef("checkpoint migrate: --to %q: want a version, one of %v", *to, claims.Versions)
	}
	if err := claims.Convert(path, checkpointLegacy(*stateDir), n); err != nil {
		return fmt.Errorf("checkpoint migrate: %w", err)
	}
	fmt.Fprintf(stdout, "%s: version %d\n", path, n)
	return nil
}

// checkpointVerify is fastpathd checkpoint verify: the store's records held
// aside, one a line, and an error if there is one.
func checkpointVerify(path string, stdout io.Writer) error {
	n, corrupt, err := claims.Verify(path)
	if err != nil {
		return fmt.Errorf("checkpoint verify: %w", err)
	}
	for _, e := range corrupt {
		line := ""
		if e.Line > 0 {
			line = fmt.Sprintf(" line %d", e.Line)
		}
		fmt.Fprintf(stdout, "corrupt: claim %s in %s%s: %s\n", e.Claim, e.File, line, e.Reason)
	}
	fmt.Fprintf(stdout, "%s: %d claims, %d corrupt\n", path, n, len(corrupt))
	if len(corrupt) > 0 {
		return fmt.Errorf("checkpoint verify: %d corrupt records: drop each with `fastpathd checkpoint repair --drop CLAIM` once the daemon is stopped", len(corrupt))
	}
	return nil
}

// claimList is the claims --drop names.
type claimList []string

func (l *claimList) String() string { return strings.Join(*l, ",") }

func (l *claimList) Set(s string) error {
	*l = append(*l, s)
	return nil
}

// checkpointLegacy names the files of the release before checkpoint
// version 2 in the daemon's state directory.
func checkpointLegacy(stateDir string) claims.Legacy {
	return claims.Legacy{CNI: filepath.Join(stateDir, "cni", "cni-checkpoint.json")}
}
