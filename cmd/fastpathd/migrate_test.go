package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/migrate"
)

const migrateTestdata = "../../dra/migrate/testdata"

// The command end to end: the objects on standard output as YAML that
// parses, in order; the report on standard error; -o writes a file per
// kind; bad flags and unreadable input are exit code 2.
func TestMigrateCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runMain([]string{"migrate", "-f", migrateTestdata}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	var kinds []string
	for _, doc := range strings.Split(stdout.String(), "\n---\n") {
		var obj struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("stdout does not parse: %v\n%s", err, doc)
		}
		if len(kinds) == 0 || kinds[len(kinds)-1] != obj.Kind {
			kinds = append(kinds, obj.Kind)
		}
	}
	if want := "FastpathNodeConfig DeviceClass NetworkAttachmentDefinition ResourceClaimTemplate"; strings.Join(kinds, " ") != want {
		t.Errorf("kinds in order %v, want %s", kinds, want)
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !strings.HasPrefix(line, "migrate: ") {
			t.Errorf("stderr line %q: want the prefix migrate: ", line)
		}
	}
	if !strings.Contains(stderr.String(), "migrate: SriovNetworkPoolConfig sriov-network-operator/workers: spec.maxUnavailable") {
		t.Errorf("stderr lacks the pool's report:\n%s", stderr.String())
	}

	dir := filepath.Join(t.TempDir(), "out")
	stdout.Reset()
	stderr.Reset()
	if code := runMain([]string{"migrate", "-f", filepath.Join(migrateTestdata, "operator.yaml"), "--resource-prefix", "intel.com", "-o", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("-o: exit code %d: %s", code, stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("-o: stdout %q, want nothing", stdout.String())
	}
	for _, f := range []string{"fastpathnodeconfigs.yaml", "deviceclasses.yaml", "networkattachmentdefinitions.yaml", "resourceclaimtemplates.yaml"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Error(err)
			continue
		}
		if f == "deviceclasses.yaml" && !strings.Contains(string(data), "extendedResourceName: intel.com/intel_nics") {
			t.Errorf("%s: no class of intel.com/intel_nics (--resource-prefix):\n%s", f, data)
		}
	}

	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no input", []string{"migrate"}, "name the objects with -f"},
		{"bad flag", []string{"migrate", "--no-such-flag"}, "no-such-flag"},
		{"missing file", []string{"migrate", "-f", filepath.Join(t.TempDir(), "nope.yaml")}, "could not be read"},
		{"files and cluster", []string{"migrate", "-f", migrateTestdata, "--from-cluster"}, "give one of them"},
	} {
		stderr.Reset()
		if code := runMain(tc.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.wantErr) {
			t.Errorf("%s: exit code %d, stderr %q; want 2 and %q", tc.name, code, stderr.String(), tc.wantErr)
		}
	}
}

// From the cluster: every kind listed in all namespaces, and one whose
// CRD is not installed skipped and said so.
func TestMigrateListSources(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(migrateTestdata, "operator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	lists := map[schema.GroupVersionResource]string{}
	for _, k := range migrate.SourceKinds {
		lists[k.Resource] = k.Kind + "List"
	}
	var objs []runtime.Object
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var u map[string]any
		if err := yaml.Unmarshal([]byte(doc), &u); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, unstructuredOf(u))
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, lists, objs...)
	got, _, err := listSources(dyn)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(objs) {
		t.Errorf("%d objects listed, want %d", len(got), len(objs))
	}
	res := migrate.Convert(migrate.Input{Objects: got}, migrate.Options{})
	if len(res.NodeConfigs) == 0 || len(res.NetworkAttachmentDefinitions) == 0 {
		t.Errorf("from the cluster: %d FastpathNodeConfigs, %d NetworkAttachmentDefinitions", len(res.NodeConfigs), len(res.NetworkAttachmentDefinitions))
	}

	// A cluster without dra-driver-sriov's CRDs: those kinds are skipped
	// and said so; the operator's are listed.
	dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, lists, objs...)
	for _, k := range migrate.SourceKinds {
		if k.Resource.Group != "sriovnetwork.openshift.io" {
			dyn.PrependReactor("list", k.Resource.Resource, func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewNotFound(k.Resource.GroupResource(), "")
			})
		}
	}
	got, skipped, err := listSources(dyn)
	if err != nil {
		t.Fatal(err)
	}
	if len(skipped) != 2 || !strings.Contains(strings.Join(skipped, "\n"), "SriovResourcePolicy: not served by the cluster") {
		t.Errorf("skipped %q, want dra-driver-sriov's two kinds", skipped)
	}
	if len(got) != len(objs) {
		t.Errorf("%d objects listed without dra-driver-sriov's kinds, want the operator's %d", len(got), len(objs))
	}
}

func unstructuredOf(m map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: m}
}
