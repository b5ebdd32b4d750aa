package status

import (
	"context"
	"encoding/json"
	"fmt"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fastpath-dra/fastpath/dataplane/fault"
	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// PodNetworkStatus writes the NPWG network-status annotation of pods.
type PodNetworkStatus struct{ Client kubernetes.Interface }

// PatchNetworkStatus merges entries into the pod's
// k8s.v1.cni.cncf.io/network-status annotation, keeping the entries of
// other writers (patchAnnotation).
func (s PodNetworkStatus) PatchNetworkStatus(ctx context.Context, namespace, name string, uid types.UID, entries []nadv1.NetworkStatus) error {
	return s.patchAnnotation(ctx, namespace, name, uid, nadv1.NetworkStatusAnnot, func(current string) (string, error) {
		value, err := npwg.MergeNetworkStatus(current, entries)
		if err != nil {
			// Not a list another writer left: ours replaces it.
			return npwg.MergeNetworkStatus("", entries)
		}
		return value, nil
	})
}

// PatchPodNetworkStatus writes the pod's network.fastpath.dev/network-status
// (KEP-3698's Pod.status.networks): fastpath is its one writer, so the
// value is replaced.
func (s PodNetworkStatus) PatchPodNetworkStatus(ctx context.Context, namespace, name string, uid types.UID, entries []pnv1.NetworkStatus) error {
	value, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	return s.patchAnnotation(ctx, namespace, name, uid, pnv1.AnnotationNetworkStatus, func(string) (string, error) { return string(value), nil })
}

// patchAnnotation sets the pod's annotation key to what value makes of
// its current value, with a merge patch that holds the pod's
// resourceVersion and UID: a write between the read and the patch makes
// it read again (up to 5 times). A pod that is gone, or is another pod of
// the same name, is left alone; an unchanged value is not written.
func (s PodNetworkStatus) patchAnnotation(ctx context.Context, namespace, name string, uid types.UID, key string, value func(current string) (string, error)) error {
	const attempts = 5
	var err error
	for range attempts {
		if err = s.patchOnce(ctx, namespace, name, uid, key, value); !apierrors.IsConflict(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("pod %s/%s: annotation %s: %w", namespace, name, key, err)
	}
	return nil
}

func (s PodNetworkStatus) patchOnce(ctx context.Context, namespace, name string, uid types.UID, key string, value func(string) (string, error)) error {
	pod, err := s.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && pod.UID != uid {
		return nil
	}
	if err != nil {
		return err
	}
	current := pod.Annotations[key]
	next, err := value(current)
	if err != nil {
		return err
	}
	if next == current {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": pod.ResourceVersion, "uid": string(uid),
		"annotations": map[string]string{key: next}}})
	if err != nil {
		return err
	}
	fault.Point("annotation.before")
	_, err = s.Client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err == nil {
		fault.Point("annotation.written")
	}
	return err
}
