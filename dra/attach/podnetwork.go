package attach

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
)

// PodNetworkGetter reads PodNetworks and PodNetworkAttachments.
type PodNetworkGetter interface {
	GetPodNetwork(ctx context.Context, name string) (*pnv1.PodNetwork, error)
	GetPodNetworkAttachment(ctx context.Context, namespace, name string) (*pnv1.PodNetworkAttachment, error)
}

// CheckPodNetwork is the name of the PodNetwork named directly or through
// the PodNetworkAttachment namespace/attachment, once both pass the KEP's
// active validation (exist, Ready, enabled) and the PodNetwork is of
// fastpath's provider or none; else the error says why.
func CheckPodNetwork(ctx context.Context, objects PodNetworkGetter, namespace, name, attachment string) (string, error) {
	pn, _, err := LookupPodNetwork(ctx, objects, namespace, name, attachment)
	if err != nil {
		return "", err
	}
	if !OurProvider(pn) {
		return "", fmt.Errorf("PodNetwork %s: its provider is %s, not %s", pn.Name, pn.Spec.Provider, pnv1.FastpathProvider)
	}
	if err := Usable(pn); err != nil {
		return "", err
	}
	return pn.Name, nil
}

// LookupPodNetwork reads the PodNetwork named directly or through the
// PodNetworkAttachment namespace/attachment, which must exist and be
// Ready; refs are the attachment's parametersRefs.
func LookupPodNetwork(ctx context.Context, objects PodNetworkGetter, namespace, name, attachment string) (*pnv1.PodNetwork, []pnv1.ParametersRef, error) {
	var refs []pnv1.ParametersRef
	if attachment != "" {
		pna, err := objects.GetPodNetworkAttachment(ctx, namespace, attachment)
		if err != nil {
			return nil, nil, fmt.Errorf("PodNetworkAttachment %s/%s: %w", namespace, attachment, err)
		}
		if err := ready(pna.Status.Conditions); err != nil {
			return nil, nil, fmt.Errorf("PodNetworkAttachment %s/%s: %w", namespace, attachment, err)
		}
		name, refs = pna.Spec.PodNetworkName, pna.Spec.ParametersRefs
	}
	pn, err := objects.GetPodNetwork(ctx, name)
	if err != nil {
		return nil, nil, fmt.Errorf("PodNetwork %s: %w", name, err)
	}
	return pn, refs, nil
}

// OurProvider says whether fastpath attaches the PodNetwork: its provider is
// fastpath's, or none.
func OurProvider(pn *pnv1.PodNetwork) bool {
	return pn.Spec.Provider == "" || pn.Spec.Provider == pnv1.FastpathProvider
}

// Usable is nil when a pod may attach to the PodNetwork now: enabled and
// Ready.
func Usable(pn *pnv1.PodNetwork) error {
	if !pn.Spec.IsEnabled() {
		return fmt.Errorf("PodNetwork %s: %s: enabled is false, no new pod attaches to it", pn.Name, pnv1.ReasonAdministrativelyDisabled)
	}
	if err := ready(pn.Status.Conditions); err != nil {
		return fmt.Errorf("PodNetwork %s: %w", pn.Name, err)
	}
	return nil
}

// ready is nil when conditions say Ready.
func ready(conds []metav1.Condition) error {
	c := meta.FindStatusCondition(conds, pnv1.ConditionReady)
	switch {
	case c == nil:
		return errors.New("not Ready yet (no Ready condition)")
	case c.Status != metav1.ConditionTrue:
		return fmt.Errorf("not Ready: %s: %s", c.Reason, c.Message)
	}
	return nil
}
