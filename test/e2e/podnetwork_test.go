//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/test/testbed"
)

// TestPodNetwork: with podNetworks on, fastpathd controller judges the
// KEP-3698 examples, applied as the KEP gives them, through their life:
// the default PodNetwork made (and made again when deleted), a PodNetwork
// Ready, AdministrativelyDisabled and Ready again, its deletion held while
// a running pod's annotation uses it and done when the pod goes, a
// PodNetwork whose parameters do not exist ParamsNotReady, and an
// attachment of it PodNetworkNotReady.
func TestPodNetwork(t *testing.T) {
	ctx := testContext(t)
	dyn := dynamicClient(t)
	networks := dyn.Resource(pnv1.PodNetworkResource)
	attachments := dyn.Resource(pnv1.PodNetworkAttachmentResource).Namespace("default")
	// After the release is gone: the default PodNetwork it made.
	t.Cleanup(func() { _ = networks.Delete(context.Background(), pnv1.DefaultPodNetworkName, metav1.DeleteOptions{}) })
	startDaemon(t, ctx, 26241, "--podnetworks", "--podnetwork-params-recheck", "2s")
	t.Cleanup(func() { controllerLogClean(t) })

	var defaultUID types.UID
	t.Run("the default PodNetwork", func(t *testing.T) {
		u := waitCondition(t, ctx, networks, pnv1.DefaultPodNetworkName, metav1.ConditionTrue, pnv1.ReasonReady, "")
		if enabled, _, _ := unstructured.NestedBool(u.Object, "spec", "enabled"); !enabled {
			t.Errorf("the default PodNetwork: spec %v", u.Object["spec"])
		}
		defaultUID = u.GetUID()
	})

	t.Run("the KEP's PodNetwork: Ready, disabled, Ready, deleted when no pod uses it", func(t *testing.T) {
		applyKEP(t, ctx, networks, "kep-podnetwork.yaml")
		waitCondition(t, ctx, networks, "dataplane", metav1.ConditionTrue, pnv1.ReasonReady, "")
		setEnabled(t, ctx, networks, "dataplane", false)
		waitCondition(t, ctx, networks, "dataplane", metav1.ConditionFalse, pnv1.ReasonAdministrativelyDisabled, "spec.enabled is false")
		setEnabled(t, ctx, networks, "dataplane", true)
		waitCondition(t, ctx, networks, "dataplane", metav1.ConditionTrue, pnv1.ReasonReady, "")
		// The spec is immutable but for enabled.
		u, err := networks.Get(ctx, "dataplane", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(u.Object, "acme.io/other", "spec", "provider")
		if _, err := networks.Update(ctx, u, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "provider is immutable") {
			t.Errorf("changing the provider: %v", err)
		}

		// Deleting it waits while a running pod uses it.
		pod := testbed.WorkloadPod("default", "e2e-podnetwork", "sleep")
		pod.Annotations = map[string]string{pnv1.AnnotationNetworks: `[{"podNetworkName":"dataplane","interfaceName":"net1"}]`}
		if _, err := bed.RunPod(ctx, pod); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bed.DeletePod(context.Background(), "default", pod.Name) })
		waitObject(t, ctx, networks, "dataplane", "the InUse finalizer", func(u *unstructured.Unstructured) bool {
			return slices.Contains(u.GetFinalizers(), pnv1.FinalizerInUse)
		})
		if err := networks.Delete(ctx, "dataplane", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// Held: still there, being deleted, while the pod runs. Checked
		// for a while: the finalizer must not go.
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			u, err := networks.Get(ctx, "dataplane", metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return false, fmt.Errorf("deleted while a running pod uses it: %w", err)
			case err != nil:
				// The poll's own end (the client's rate limiter refuses
				// a wait past its deadline), or the API server busy.
				return false, nil
			}
			if u.GetDeletionTimestamp() == nil {
				return false, errors.New("no deletion timestamp")
			}
			return false, nil
		})
		if !wait.Interrupted(err) {
			t.Fatal(err)
		}
		if err := bed.DeletePod(ctx, "default", pod.Name); err != nil {
			t.Fatal(err)
		}
		waitObjectGone(t, ctx, networks, "dataplane")
	})

	t.Run("the KEP's PodNetwork with parametersRefs and attachment", func(t *testing.T) {
		applyKEP(t, ctx, networks, "kep-podnetwork-params.yaml")
		// NetworkAttachmentDefinitions are fastpath's kind to judge; these
		// do not exist.
		waitCondition(t, ctx, networks, "dataplane", metav1.ConditionFalse, pnv1.ReasonParamsNotReady, "NetworkAttachmentDefinition default/parametersA")
		u := waitObject(t, ctx, networks, "dataplane", "ParamsReady", func(u *unstructured.Unstructured) bool {
			return condition(u, pnv1.ConditionParamsReady) != nil
		})
		if c := condition(u, pnv1.ConditionParamsReady); c.Status != metav1.ConditionFalse || c.Reason != pnv1.ReasonParamsMissing ||
			!strings.Contains(c.Message, "default/complementaryParametersB") {
			t.Errorf("ParamsReady = %+v", c)
		}
		applyKEP(t, ctx, attachments, "kep-podnetworkattachment.yaml")
		waitCondition(t, ctx, attachments, "pod1", metav1.ConditionFalse, pnv1.ReasonPodNetworkNotReady, "PodNetwork dataplane is not Ready (ParamsNotReady")
		// The attachment keeps its PodNetwork in use.
		waitObject(t, ctx, networks, "dataplane", "the InUse finalizer", func(u *unstructured.Unstructured) bool {
			return slices.Contains(u.GetFinalizers(), pnv1.FinalizerInUse)
		})
	})

	t.Run("the default PodNetwork made again", func(t *testing.T) {
		if err := networks.Delete(ctx, pnv1.DefaultPodNetworkName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitObject(t, ctx, networks, pnv1.DefaultPodNetworkName, "a new default PodNetwork", func(u *unstructured.Unstructured) bool {
			return u.GetUID() != defaultUID && u.GetDeletionTimestamp() == nil
		})
		waitCondition(t, ctx, networks, pnv1.DefaultPodNetworkName, metav1.ConditionTrue, pnv1.ReasonReady, "")
	})
}

// applyKEP creates the KEP's example file (dra/api/podnetwork/v1alpha1/
// testdata) as it is, and deletes it when the test ends, waiting until it
// is gone.
func applyKEP(t *testing.T, ctx context.Context, r dynamic.ResourceInterface, file string) {
	t.Helper()
	data, err := os.ReadFile("../../dra/api/podnetwork/v1alpha1/testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s: %v", file, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = r.Delete(ctx, u.GetName(), metav1.DeleteOptions{})
		waitObjectGone(t, ctx, r, u.GetName())
	})
}

func setEnabled(t *testing.T, ctx context.Context, r dynamic.ResourceInterface, name string, enabled bool) {
	t.Helper()
	patch := []byte(`{"spec":{"enabled":false}}`)
	if enabled {
		patch = []byte(`{"spec":{"enabled":true}}`)
	}
	if _, err := r.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func condition(u *unstructured.Unstructured, typ string) *metav1.Condition {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var st pnv1.PodNetworkStatus
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"conditions": conds}, &st); err != nil {
		return nil
	}
	return meta.FindStatusCondition(st.Conditions, typ)
}

// waitObject waits until the object name is as ok wants it.
func waitObject(t *testing.T, ctx context.Context, r dynamic.ResourceInterface, name, what string, ok func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	var last *unstructured.Unstructured
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := r.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = u
		return ok(u), nil
	})
	if err != nil {
		var status any
		if last != nil {
			status = last.Object["status"]
		}
		t.Fatalf("%s: never %s; status %v", name, what, status)
	}
	return last
}

// waitCondition waits for the object's Ready condition with status and
// reason, its message containing msg.
func waitCondition(t *testing.T, ctx context.Context, r dynamic.ResourceInterface, name string, status metav1.ConditionStatus, reason, msg string) *unstructured.Unstructured {
	t.Helper()
	return waitObject(t, ctx, r, name, "Ready "+string(status)+" "+reason, func(u *unstructured.Unstructured) bool {
		c := condition(u, pnv1.ConditionReady)
		return c != nil && c.Status == status && c.Reason == reason && strings.Contains(c.Message, msg) && c.ObservedGeneration == u.GetGeneration()
	})
}

func waitObjectGone(t *testing.T, ctx context.Context, r dynamic.ResourceInterface, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := r.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("%s: never gone", name)
	}
}
