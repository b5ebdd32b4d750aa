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

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// PodNetworkStatus writes the NPWG network-status annotation of pods.
type PodNetworkStatus struct{ Client kubernetes.Interface }

// PatchNetworkStatus merges entries into the pod's
// k8s.v1.cni.cncf.io/network-status annotation, keeping the entries of
// other writers, with a merge patch that holds the pod's resourceVersion:
// a write between the read and the patch makes it read again. A pod that
// is gone, or is another pod of the same name, is left alone.
func (s PodNetworkStatus) PatchNetworkStatus(ctx context.Context, namespace, name string, uid types.UID, entries []nadv1.NetworkStatus) error {
	const attempts = 5
	var err error
	for range attempts {
		if err = s.patch(ctx, namespace, name, uid, entries); !apierrors.IsConflict(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("pod %s/%s: annotation %s: %w", namespace, name, nadv1.NetworkStatusAnnot, err)
	}
	return nil
}

func (s PodNetworkStatus) patch(ctx context.Context, namespace, name string, uid types.UID, entries []nadv1.NetworkStatus) error {
	pod, err := s.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && pod.UID != uid {
		return nil
	}
	if err != nil {
		return err
	}
	current := pod.Annotations[nadv1.NetworkStatusAnnot]
	value, err := npwg.MergeNetworkStatus(current, entries)
	if err != nil {
		// Not a list another writer left: ours replaces it.
		if value, err = npwg.MergeNetworkStatus("", entries); err != nil {
			return err
		}
	}
	if value == current {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": pod.ResourceVersion, "uid": string(uid),
		"annotations": map[string]string{nadv1.NetworkStatusAnnot: value}}})
	if err != nil {
		return err
	}
	_, err = s.Client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// PatchPodNetworkStatus writes the pod's network.fastpath.dev/network-status
// (KEP-3698's Pod.status.networks): fastpath is its one writer, so the
// value is replaced, with a merge patch that holds the pod's
// resourceVersion and UID.
func (s PodNetworkStatus) PatchPodNetworkStatus(ctx context.Context, namespace, name string, uid types.UID, entries []pnv1.NetworkStatus) error {
	value, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	const attempts = 5
	for range attempts {
		pod, err := s.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && pod.UID != uid {
			return nil
		}
		if err != nil {
			return fmt.Errorf("pod %s/%s: annotation %s: %w", namespace, name, pnv1.AnnotationNetworkStatus, err)
		}
		if pod.Annotations[pnv1.AnnotationNetworkStatus] == string(value) {
			return nil
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": pod.ResourceVersion, "uid": string(uid),
			"annotations": map[string]string{pnv1.AnnotationNetworkStatus: string(value)}}})
		if err != nil {
			return err
		}
		_, err = s.Client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		if !apierrors.IsConflict(err) {
			if err != nil {
				return fmt.Errorf("pod %s/%s: annotation %s: %w", namespace, name, pnv1.AnnotationNetworkStatus, err)
			}
			return nil
		}
	}
	return fmt.Errorf("pod %s/%s: annotation %s: changed by others %d times in a row", namespace, name, pnv1.AnnotationNetworkStatus, attempts)
}
