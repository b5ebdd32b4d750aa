//go:build privileged && faultinject

package dra_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	resourcev1 "k8s.io/client-go/kubernetes/typed/resource/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/watch"
)

// apiObjects are the rig's API server: the objects the daemon reads and
// writes, kept in a file of the rig's directory. A worker's fake clients
// start from the file and save it after each write they accept, before
// they answer: what a killed worker wrote outlives it, as on an API
// server, and what it had not written yet does not.
type apiObjects struct {
	Nodes      []corev1.Node
	Claims     []resourceapi.ResourceClaim
	Pods       []corev1.Pod
	Slices     []resourceapi.ResourceSlice
	IPAMClaims []npwg.IPAMClaim
}

var (
	nodesResource  = corev1.SchemeGroupVersion.WithResource("nodes")
	claimsResource = resourceapi.SchemeGroupVersion.WithResource("resourceclaims")
	podsResource   = corev1.SchemeGroupVersion.WithResource("pods")
	slicesResource = resourceapi.SchemeGroupVersion.WithResource("resourceslices")
	ipamClaimKind  = schema.FromAPIVersionAndKind(npwg.IPAMClaimGroupVersion, npwg.IPAMClaimKind)
)

func readAPI(path string) (apiObjects, error) {
	var objs apiObjects
	data, err := os.ReadFile(path)
	if err != nil {
		return objs, fmt.Errorf("read the rig's API objects: %w", err)
	}
	if err := json.Unmarshal(data, &objs); err != nil {
		return objs, fmt.Errorf("decode the rig's API objects %s: %w", path, err)
	}
	return objs, nil
}

func writeAPI(path string, objs apiObjects) error {
	data, err := json.Marshal(objs)
	if err != nil {
		return fmt.Errorf("encode the rig's API objects: %w", err)
	}
	return claims.WriteFileAtomic(path, data, 0o600)
}

// openAPI returns fake clients (typed, and dynamic for IPAMClaims) holding
// the objects saved at path, which save them there after every write.
func openAPI(path string) (client *fake.Clientset, dynClient *dynamicfake.FakeDynamicClient, _ error) {
	objs, err := readAPI(path)
	if err != nil {
		return nil, nil, err
	}
	var typed, dyn []runtime.Object
	for i := range objs.Nodes {
		typed = append(typed, &objs.Nodes[i])
	}
	for i := range objs.Slices {
		typed = append(typed, &objs.Slices[i])
	}
	for i := range objs.Claims {
		typed = append(typed, &objs.Claims[i])
	}
	for i := range objs.Pods {
		typed = append(typed, &objs.Pods[i])
	}
	for i := range objs.IPAMClaims {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&objs.IPAMClaims[i])
		if err != nil {
			return nil, nil, fmt.Errorf("encode IPAMClaim %s: %w", objs.IPAMClaims[i].Name, err)
		}
		dyn = append(dyn, &unstructured.Unstructured{Object: u})
	}
	client = fake.NewClientset(typed...)
	dynClient = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{watch.IPAMClaimResource: npwg.IPAMClaimKind + "List"}, dyn...)
	var mu sync.Mutex
	save := func() error {
		mu.Lock()
		defer mu.Unlock()
		var out apiObjects
		list, err := client.Tracker().List(nodesResource, corev1.SchemeGroupVersion.WithKind("Node"), "")
		if err != nil {
			return err
		}
		out.Nodes = list.(*corev1.NodeList).Items
		if list, err = client.Tracker().List(slicesResource, resourceapi.SchemeGroupVersion.WithKind("ResourceSlice"), ""); err != nil {
			return err
		}
		out.Slices = list.(*resourceapi.ResourceSliceList).Items
		if list, err = client.Tracker().List(claimsResource, resourceapi.SchemeGroupVersion.WithKind("ResourceClaim"), ""); err != nil {
			return err
		}
		out.Claims = list.(*resourceapi.ResourceClaimList).Items
		if list, err = client.Tracker().List(podsResource, corev1.SchemeGroupVersion.WithKind("Pod"), ""); err != nil {
			return err
		}
		out.Pods = list.(*corev1.PodList).Items
		if list, err = dynClient.Tracker().List(watch.IPAMClaimResource, ipamClaimKind, ""); err != nil {
			return err
		}
		for _, u := range list.(*unstructured.UnstructuredList).Items {
			var c npwg.IPAMClaim
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &c); err != nil {
				return fmt.Errorf("decode IPAMClaim %s: %w", u.GetName(), err)
			}
			out.IPAMClaims = append(out.IPAMClaims, c)
		}
		return writeAPI(path, out)
	}
	// Each client runs one reaction at a time; the first reactor does
	// what the default one does, then saves.
	persist := func(tracker k8stesting.ObjectTracker) k8stesting.ReactionFunc {
		react := k8stesting.ObjectReaction(tracker)
		return func(action k8stesting.Action) (bool, runtime.Object, error) {
			handled, obj, err := react(action)
			switch action.GetVerb() {
			case "create", "update", "patch", "delete":
				if err == nil {
					if serr := save(); serr != nil {
						return true, nil, fmt.Errorf("save the rig's API objects: %w", serr)
					}
				}
			}
			return handled, obj, err
		}
	}
	client.PrependReactor("*", "*", persist(client.Tracker()))
	dynClient.PrependReactor("*", "*", persist(dynClient.Tracker()))
	// The API server names the slices created with generateName.
	client.PrependReactor("create", "resourceslices", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if slice := action.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice); slice.Name == "" {
			slice.Name = slice.GenerateName + utilrand.String(5)
		}
		return false, nil, nil
	})
	return client, dynClient, nil
}

// slowClaims is a client that answers reads and status writes of claims
// only once open is called: the status writes Prepare and the hooks leave
// to the background then land after the worker's operation, as they may
// with a slow API server, and a kill in one falls at the same moment of
// the operation in every run.
func slowClaims(client kubernetes.Interface) (slow kubernetes.Interface, open func()) {
	gate := make(chan struct{})
	return gatedClient{client, gate}, sync.OnceFunc(func() { close(gate) })
}

type gatedClient struct {
	kubernetes.Interface
	gate <-chan struct{}
}

func (c gatedClient) ResourceV1() resourcev1.ResourceV1Interface {
	return gatedResource{c.Interface.ResourceV1(), c.gate}
}

type gatedResource struct {
	resourcev1.ResourceV1Interface
	gate <-chan struct{}
}

func (r gatedResource) ResourceClaims(namespace string) resourcev1.ResourceClaimInterface {
	return gatedClaims{r.ResourceV1Interface.ResourceClaims(namespace), r.gate}
}

type gatedClaims struct {
	resourcev1.ResourceClaimInterface
	gate <-chan struct{}
}

func (c gatedClaims) wait(ctx context.Context) error {
	select {
	case <-c.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c gatedClaims) Get(ctx context.Context, name string, opts metav1.GetOptions) (*resourceapi.ResourceClaim, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	return c.ResourceClaimInterface.Get(ctx, name, opts)
}

func (c gatedClaims) UpdateStatus(ctx context.Context, claim *resourceapi.ResourceClaim, opts metav1.UpdateOptions) (*resourceapi.ResourceClaim, error) {
	if err := c.wait(ctx); err != nil {
		return nil, err
	}
	return c.ResourceClaimInterface.UpdateStatus(ctx, claim, opts)
}

// stableMACs are the MACs the rig fixes (its links', and the one the
// claim sets); any other in the API's objects is a macvlan's, new each
// time it is made.
var stableMACs = []string{"02:fa:f0:00:00:01", "02:fa:f0:00:00:02", "02:fa:f0:00:00:03", "02:00:00:fa:0f:01"}

var anyMAC = regexp.MustCompile(`\b[0-9a-f]{2}(:[0-9a-f]{2}){5}\b`)

func randomMACs(s string) string {
	return anyMAC.ReplaceAllStringFunc(s, func(mac string) string {
		if slices.Contains(stableMACs, mac) {
			return mac
		}
		return "random"
	})
}

// apiSnapshot adds to s what the daemon wrote to the API: the claims'
// device statuses, the pod's annotations, the IPAMClaim's status and,
// once published, the devices of the node's slices and their taints,
// each under a key starting with "api ", without the times the writes
// happened at.
func (r *rig) apiSnapshot(s snapshot) error {
	objs, err := readAPI(r.APIFile)
	if err != nil {
		return err
	}
	var errs []error
	put := func(key string, v any) {
		data, err := json.Marshal(v)
		errs = append(errs, err)
		s["api "+key] = randomMACs(string(data))
	}
	for _, c := range objs.Claims {
		devs := slices.Clone(c.Status.Devices)
		for i := range devs {
			devs[i].Conditions = untimed(devs[i].Conditions)
		}
		slices.SortFunc(devs, func(a, b resourceapi.AllocatedDeviceStatus) int {
			return strings.Compare(fmt.Sprint(a.Driver, a.Pool, a.Device, shareOf(a.ShareID)), fmt.Sprint(b.Driver, b.Pool, b.Device, shareOf(b.ShareID)))
		})
		put("claim "+c.Name+" status.devices", devs)
	}
	for _, p := range objs.Pods {
		put("pod "+p.Name+" annotations", p.Annotations)
	}
	for _, c := range objs.IPAMClaims {
		st := c.Status
		st.Conditions = untimed(st.Conditions)
		put("ipamclaim "+c.Name+" status", st)
	}
	if len(objs.Slices) > 0 {
		devs, taints := sliceDevices(objs.Slices)
		put("slices devices", devs)
		put("slices taints", taints)
	}
	return errors.Join(errs...)
}

func untimed(conds []metav1.Condition) []metav1.Condition {
	out := slices.Clone(conds)
	for i := range out {
		out[i].LastTransitionTime = metav1.Time{}
	}
	return out
}

func shareOf(id *string) string {
	if id == nil {
		return ""
	}
	return *id
}

// sliceDevices are the devices the slices publish, in name order, and the
// taints of each (key=value:effect).
func sliceDevices(list []resourceapi.ResourceSlice) (names []string, taints map[string][]string) {
	taints = map[string][]string{}
	for _, sl := range list {
		for _, dev := range sl.Spec.Devices {
			names = append(names, dev.Name)
			for _, t := range dev.Taints {
				taints[dev.Name] = append(taints[dev.Name], fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect))
			}
		}
	}
	slices.Sort(names)
	return names, taints
}
