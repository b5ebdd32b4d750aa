package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/fastpath-dra/fastpath/devices/filter"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/validate"
)

// stringList is a flag that may be given many times.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// errProblems: the inputs were read, and problems were found (exit 1).
type errProblems struct{ problems, objects int }

func (e errProblems) Error() string {
	return fmt.Sprintf("validate: %d problems in %d objects", e.problems, e.objects)
}

func validateCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var files stringList
	var policy cniPolicyOptions
	var nadConf npwgConfigOptions
	flags := newFlagSet("validate", stderr)
	flags.Var(&files, "f", "a manifest file (multi-document YAML or JSON), a directory of them (*.yaml, *.yml, *.json, recursively), or - for standard input; may be repeated")
	strict := flags.Bool("strict", false, "an object of a kind validate does not judge (or judges only in part) is a problem (exit 1), not a warning: for a CI job that must tell checked from skipped")
	policy.addFlags(flags)
	// No directory by default: the operator's configurations are the
	// node's, not the machine's validate runs on.
	nadConf.addFlags(flags, "")
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), `Usage: fastpathd validate -f FILE... [flags]

Checks ResourceClaims, ResourceClaimTemplates, DeviceClasses, CNIConfigs,
Pods, NetworkAttachmentDefinitions, PodNetworks and PodNetworkAttachments as
fastpathd would, short of what needs the allocated devices or the cluster:
every opaque config of fastpath.dev and cni.dra.networking.x-k8s.io, a Pod's
k8s.v1.cni.cncf.io/networks annotation (the Network Plumbing WG's network
selection), a NetworkAttachmentDefinition's CNI configuration as the node
reads and judges it (--cni-plugins, --npwg-host-devices, --npwg-host-paths,
--npwg-host-options, --npwg-vlan-ids, --npwg-conf-namespaces; one with an
empty spec.config is judged further only with --npwg-conf-dir). Prints one line per problem
(file:line: object: request: field: problem), and on standard error one line
per object it does not judge (skipped: kind namespace/name), a warning; with
--strict each is a problem instead. KEP-3698's objects written as the KEP
writes them (apiVersion: v1) are refused, naming the group to use.
Exit codes: 0 no problem, 1 problems found, 2 unreadable input or bad flags.

`)
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	files = append(files, flags.Args()...)
	if len(files) == 0 {
		return usagef("validate: name the manifests with -f FILE (- for standard input)")
	}
	if err := policy.validate("validate"); err != nil {
		return err
	}
	if err := nadConf.validate("validate"); err != nil {
		return err
	}
	docs, unreadable := validate.ReadManifests(files, stdin)
	for _, err := range unreadable {
		fmt.Fprintf(stderr, "fastpathd: validate: %v\n", err)
	}
	rules := npwg.ConfigRules{ConfDir: nadConf.confDirRules(), Plugins: splitList(policy.plugins),
		Policy: nadConf.hostPolicy()}
	problems, skipped := validate.CheckManifests(docs, validate.Check{Policy: policy.policy(),
		CompileFilter: func(expr string) error { _, err := filter.Compile(expr); return err }}, rules)
	slices.SortStableFunc(problems, func(a, b validate.Finding) int { return validate.ByPlace(a.Doc, b.Doc) })
	slices.SortStableFunc(skipped, func(a, b validate.Skip) int { return validate.ByPlace(a.Doc, b.Doc) })
	objects := map[string]bool{}
	count := 0
	for _, s := range skipped {
		if !*strict {
			fmt.Fprintln(stderr, s)
			continue
		}
		fmt.Fprintf(stdout, "%s: %s: not judged (--strict): %s\n", s.Doc.Where(), s.Doc.Object(), s.Why)
		objects[s.Doc.Where()+" "+s.Doc.Object()] = true
		count++
	}
	// Configs in another driver's form: what they are in fastpath's.
	for _, t := range validate.Translations(docs) {
		fmt.Fprintln(stderr, t)
	}
	for _, p := range problems {
		fmt.Fprintln(stdout, p)
		objects[p.Doc.Where()+" "+p.Doc.Object()] = true
		count += p.Count()
	}
	switch {
	case len(unreadable) > 0:
		return usagef("validate: %d inputs could not be read", len(unreadable))
	case count > 0:
		return errProblems{count, len(objects)}
	}
	return nil
}
