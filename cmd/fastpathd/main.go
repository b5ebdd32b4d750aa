// Command fastpathd is the fastpath node daemon: a DRA driver and NRI plugin
// that hands pods fast-path network devices.
//
//	fastpathd [--version] [--help] COMMAND [flags]
//
// Commands: run (the daemon), inventory (show the node's devices), probe
// (ask the daemon whether it is alive or ready), validate (check manifests
// as Prepare would), controller (the status of CNIConfig objects),
// networks (the node's networks, through the daemon's CRI Network API).
// Exit code 2 means bad flags or configuration, 1 a runtime failure.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

// version is set at build time: -ldflags "-X main.version=...".
var version = "dev"

// usageError is a failure of the user's input: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

const usage = `fastpathd gives Kubernetes pods fast-path network devices (SR-IOV VFs,
AF_XDP-ready NICs, memif endpoints) as a DRA driver and NRI plugin.

Usage:
  fastpathd run [flags]         run the node daemon
  fastpathd inventory [flags]   show the devices this node would offer
  fastpathd probe alive|ready   ask this pod's daemon, on its health socket
  fastpathd validate -f FILE... check claims, classes, CNIConfigs, pods and networks as the node would
  fastpathd controller [flags]  write the status of CNIConfig objects (one per cluster, leader-elected)
  fastpathd networks list|set|remove  the node's networks, through the daemon's CRI Network API
  fastpathd checkpoint migrate|verify|repair  rewrite the node's checkpoint for an earlier release, check it, drop a corrupt record
  fastpathd migrate -f FILE...  convert the SR-IOV Network Operator's and dra-driver-sriov's objects into fastpath's
  fastpathd --version           print the version
  fastpathd COMMAND --help      show a command's flags

Exit codes: 0 success, 1 runtime failure, 2 bad flags or configuration.
`

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, versionString())
		return 0
	case "run":
		err = runCommand(args[1:], stderr)
	case "inventory":
		err = inventoryCommand(args[1:], stdout, stderr)
	case "probe":
		err = probeCommand(args[1:], stdout, stderr)
	case "validate":
		err = validateCommand(args[1:], os.Stdin, stdout, stderr)
	case "controller":
		err = controllerCommand(args[1:], stderr)
	case "networks":
		err = networksCommand(args[1:], stdout, stderr)
	case "checkpoint":
		err = checkpointCommand(args[1:], stdout, stderr)
	case "migrate":
		err = migrateCommand(args[1:], os.Stdin, stdout, stderr)
	default:
		err = usagef("unknown command %q; see fastpathd --help", args[0])
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "fastpathd: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "fastpathd: %v\n", err)
		return 1
	}
}

func versionString() string {
	s := fmt.Sprintf("fastpathd %s (%s %s/%s", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "k8s.io/client-go" {
				s += ", client-go " + dep.Version
			}
		}
	}
	return s + ")"
}
