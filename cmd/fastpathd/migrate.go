package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fastpath-dra/fastpath/dra/migrate"
	"github.com/fastpath-dra/fastpath/dra/validate"
)

func migrateCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var files stringList
	flags := newFlagSet("migrate", stderr)
	flags.Var(&files, "f", "a manifest file of the SR-IOV Network Operator's or dra-driver-sriov's objects (multi-document YAML or JSON), a directory of them (*.yaml, *.yml, *.json, recursively), or - for standard input; may be repeated")
	prefix := flags.String("resource-prefix", migrate.DefaultResourcePrefix, "the operator's prefix of resource names (its RESOURCE_PREFIX): a policy's resourceName foo is the resource PREFIX/foo")
	fromCluster := flags.Bool("from-cluster", false, "read the objects of the six kinds, in all namespaces, from the cluster of --kubeconfig (a kind whose CRD is not installed is skipped)")
	kubeconfig := flags.String("kubeconfig", os.Getenv("KUBECONFIG"), "the kubeconfig of --from-cluster (default $KUBECONFIG)")
	outDir := flags.String("o", "", "write the objects to this directory, one file per kind (fastpathnodeconfigs.yaml, deviceclasses.yaml, networkattachmentdefinitions.yaml, resourceclaimtemplates.yaml); default: one YAML stream on standard output")
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), `Usage: fastpathd migrate -f FILE... [flags]
       fastpathd migrate --from-cluster [--kubeconfig FILE] [flags]

Converts the SR-IOV Network Operator's objects (sriovnetwork.openshift.io/v1:
SriovNetworkNodePolicy, SriovNetwork, SriovIBNetwork, SriovNetworkPoolConfig)
and dra-driver-sriov's (sriovnetwork.k8snetworkplumbingwg.io/v1alpha1:
SriovResourcePolicy, DeviceAttributes) into fastpath's objects that do the
same: a FastpathNodeConfig per node selector (the VFs to make, their
drivers, the resource names), a DeviceClass per resource (its
extendedResourceName the resource, so that pods written for the device
plugin keep working), the NetworkAttachmentDefinition the operator renders
of each network, and a ResourceClaimTemplate per network for pods that
claim the VF instead. Nothing is applied: review the objects, then
kubectl apply them. On standard error, one line per field with no
equivalent, or changed, and what to do (migrate: KIND NAMESPACE/NAME:
FIELD: ...).
Exit codes: 0 converted (fields without equivalent are reported, not
errors), 1 the cluster could not be read, 2 unreadable input or bad flags.

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
	switch {
	case len(files) == 0 && !*fromCluster:
		return usagef("migrate: name the objects with -f FILE (- for standard input), or read them with --from-cluster")
	case len(files) > 0 && *fromCluster:
		return usagef("migrate: -f and --from-cluster: give one of them")
	}
	var in migrate.Input
	if *fromCluster {
		objs, skipped, err := clusterObjects(*kubeconfig)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		for _, s := range skipped {
			fmt.Fprintf(stderr, "migrate: %s\n", s)
		}
		in.Objects = objs
	} else {
		docs, unreadable := validate.ReadManifests(files, stdin)
		if len(unreadable) > 0 {
			for _, err := range unreadable {
				fmt.Fprintf(stderr, "fastpathd: migrate: %v\n", err)
			}
			return usagef("migrate: %d inputs could not be read", len(unreadable))
		}
		in = migrate.InputOf(docs)
	}
	res := migrate.Convert(in, migrate.Options{ResourcePrefix: *prefix})
	if err := writeObjects(res, *outDir, stdout); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, item := range res.Report {
		fmt.Fprintf(stderr, "migrate: %s\n", item)
	}
	return nil
}

// writeObjects writes the objects to stdout, or to dir a file per kind.
func writeObjects(res migrate.Result, dir string, stdout io.Writer) error {
	if dir == "" {
		data, err := migrate.YAML(res.Objects())
		if err != nil {
			return err
		}
		_, err = stdout.Write(data)
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, k := range []struct {
		file string
		objs []any
	}{
		{"fastpathnodeconfigs.yaml", anys(res.NodeConfigs)},
		{"deviceclasses.yaml", anys(res.DeviceClasses)},
		{"networkattachmentdefinitions.yaml", anys(res.NetworkAttachmentDefinitions)},
		{"resourceclaimtemplates.yaml", anys(res.ResourceClaimTemplates)},
	} {
		if len(k.objs) == 0 {
			continue
		}
		data, err := migrate.YAML(k.objs)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, k.file), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func anys[T any](objs []*T) []any {
	out := make([]any, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return out
}

// clusterObjects lists the six kinds in all namespaces; a kind whose CRD
// is not installed is skipped, and said so.
func clusterObjects(kubeconfig string) ([]migrate.Object, []string, error) {
	if kubeconfig == "" {
		return nil, nil, usagef("migrate: --from-cluster needs --kubeconfig (or $KUBECONFIG)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, usagef("migrate: --kubeconfig %s: %w", kubeconfig, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return listSources(dyn)
}

func listSources(dyn dynamic.Interface) ([]migrate.Object, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var objs []migrate.Object
	var skipped []string
	for _, k := range migrate.SourceKinds {
		list, err := dyn.Resource(k.Resource).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		switch {
		case apierrors.IsNotFound(err):
			skipped = append(skipped, fmt.Sprintf("%s: not served by the cluster (%s): skipped", k.Kind, k.Resource.GroupResource()))
			continue
		case err != nil:
			return nil, nil, fmt.Errorf("list %s: %w", k.Resource.GroupResource(), err)
		}
		for _, item := range list.Items {
			js, err := item.MarshalJSON()
			if err != nil {
				return nil, nil, fmt.Errorf("%s %s/%s: %w", k.Kind, item.GetNamespace(), item.GetName(), err)
			}
			objs = append(objs, migrate.Object{Where: "cluster", JSON: js})
		}
	}
	return objs, skipped, nil
}
