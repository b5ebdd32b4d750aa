package nri

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// onDiskConf is the operator's configuration of the network "storage": a
// master the host-object policy (eth9, eth7) does not allow, which an
// on-disk configuration may name.
const onDiskConf = `{"cniVersion": "1.0.0", "name": "storage", "type": "macvlan", "master": "ens1f0", "ipam": {"type": "static"}}`

// newConfDirRig is the NPWG rig with the operator's configuration of
// "storage" in its directory, and objects of that name without a
// spec.config in namespaces default and shared; conf are the namespaces
// that may use the directory (--npwg-conf-namespaces).
func newConfDirRig(t *testing.T, conf ...string) *npwgRig {
	t.Helper()
	r := newNPWGRig(t)
	o := r.plugin.opts.NPWG
	o.ConfNamespaces = conf
	if err := os.WriteFile(filepath.Join(o.ConfDir, "storage.conf"), []byte(onDiskConf), 0o644); err != nil {
		t.Fatal(err)
	}
	nads := o.NADs.(fakeNADs)
	nads["default/storage"] = nad("default", "storage", "")
	nads["shared/storage"] = nad("shared", "storage", "")
	return r
}

// A network whose object has an empty spec.config runs the operator's
// configuration of its name only for the namespaces --npwg-conf-namespaces
// lists ("*": all); elsewhere the sandbox fails before any plugin runs,
// naming the object, the configuration it would have had and the flag,
// and nothing is recorded.
func TestNPWGOnDiskConfig(t *testing.T) {
	for _, tc := range []struct {
		name, networks string
		conf           []string
		want           []string // in the error; none: attached
	}{
		{name: "its namespace listed", networks: "storage", conf: []string{"default"}},
		{name: "every namespace", networks: "shared/storage", conf: []string{npwg.AllNamespaces}},
		{name: "none by default", networks: "storage", want: []string{"element 0 (network default/storage, interface net1)",
			`NetworkAttachmentDefinition default/storage: on-disk configuration not allowed`, `the configuration named "storage" in `, "--npwg-conf-namespaces: none",
			"ask the operator to add namespace default to --npwg-conf-namespaces"}},
		{name: "another namespace listed", networks: "shared/storage", conf: []string{"default"},
			want: []string{"network shared/storage", "namespace shared may not use", "--npwg-conf-namespaces: default"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newConfDirRig(t, tc.conf...)
			err := r.plugin.AttachPod(r.ctx, npwgPod(tc.networks))
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				rec, _ := r.store.Get(npwgKey(npwgPodUID))
				if len(rec.Networks) != 1 || !strings.Contains(string(rec.Networks[0].Conflist), `"master":"ens1f0"`) {
					t.Errorf("recorded %+v, want the operator's configuration", rec.Networks)
				}
				if want := []string{"ADD net1"}; !slices.Equal(r.cni.order, want) {
					t.Errorf("CNI calls %v, want %v", r.cni.order, want)
				}
				return
			}
			if !errors.Is(err, npwg.ErrConfDirNotAllowed) {
				t.Fatalf("error %v, want ErrConfDirNotAllowed", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if len(r.cni.order) != 0 {
				t.Errorf("CNI ran: %v", r.cni.order)
			}
			if _, ok := r.store.Get(npwgKey(npwgPodUID)); ok {
				t.Error("recorded")
			}
		})
	}
}

// A PodNetwork's parametersRefs reach the operator's configurations by
// the same rule: the object they name is judged in its own namespace.
func TestPodNetworkOnDiskConfig(t *testing.T) {
	ref := pnv1.ParametersRef{Group: "k8s.cni.cncf.io", Kind: "NetworkAttachmentDefinition", Namespace: "shared", Name: "storage"}
	for _, tc := range []struct {
		name string
		conf []string
		want string // in the error; "": attached
	}{
		{name: "its namespace listed", conf: []string{"shared"}},
		{name: "not listed", conf: []string{"default"}, want: "NetworkAttachmentDefinition shared/storage: on-disk configuration not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newConfDirRig(t, tc.conf...)
			r.plugin.opts.PodNetworks = &PodNetworkOptions{Objects: fakePodNetworks{networks: map[string]*pnv1.PodNetwork{"storage": podNetwork("storage", true, ref)}}}
			pod := npwgPod("")
			pod.PodNetworks = `[{"podNetworkName": "storage", "interfaceName": "net1"}]`
			err := r.plugin.AttachPod(r.ctx, pod)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "" && !slices.Equal(r.cni.order, []string{"ADD net1"}):
				t.Errorf("CNI calls %v, want ADD net1", r.cni.order)
			case tc.want != "" && (!errors.Is(err, npwg.ErrConfDirNotAllowed) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want ErrConfDirNotAllowed and %q", err, tc.want)
			case tc.want != "" && len(r.cni.order) != 0:
				t.Errorf("CNI ran: %v", r.cni.order)
			}
		})
	}
}
