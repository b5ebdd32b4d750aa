package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/npwg"
	"github.com/fastpath-dra/fastpath/dra/watch"
)

// paramsKind is a kind of parameters object fastpath owns, and so judges
// for a ParamsReady condition.
type paramsKind struct {
	kind       string
	resource   schema.GroupVersionResource
	namespaced bool
}

// paramsKinds are the kinds of parametersRefs fastpath owns: its approved
// CNI configs and the Network Plumbing WG's NetworkAttachmentDefinitions.
// A ref names one by kind or, as the KEP's example does, by resource.
var paramsKinds = []paramsKind{
	{kind: v1alpha1.KindCNIConfig, resource: watch.CNIConfigResource},
	{kind: "NetworkAttachmentDefinition", resource: watch.NADResource, namespaced: true},
}

func ownedParamsKind(ref pnv1.ParametersRef) (paramsKind, bool) {
	for _, k := range paramsKinds {
		if ref.Group == k.resource.Group && (ref.Kind == k.kind || ref.Kind == k.resource.Resource) {
			return k, true
		}
	}
	return paramsKind{}, false
}

// paramsJudge decides the ParamsReady condition of an object's
// parametersRefs, reading the objects they name.
type paramsJudge struct {
	client dynamic.Interface
	policy cnipolicy.Options
	// allowedNamespaces are the namespaces whose namespaced objects a
	// PodNetworkAttachment of any namespace may name (npwg.AllNamespaces:
	// all); those of its own it always may.
	allowedNamespaces []string
}

// mayUse says whether a PodNetworkAttachment of namespace may use the
// objects of namespace ns.
func (j paramsJudge) mayUse(namespace, ns string) bool {
	return ns == namespace || slices.Contains(j.allowedNamespaces, npwg.AllNamespaces) || slices.Contains(j.allowedNamespaces, ns)
}

// paramsReady is the ParamsReady condition of refs, read in namespace
// where a ref of a namespaced kind has none (a PodNetworkAttachment's; ""
// for a PodNetwork, whose refs must name theirs). It is nil when fastpath
// does not own every kind refs name: the owner of the others writes the
// condition (the KEP leaves it to the implementation that owns them).
// An error is the API server's, to retry.
//
// A PodNetworkAttachment's ref to an object of a namespace it may not use
// (mayUse) is not read: the condition says the same whether that object
// exists or not, so that an attachment cannot tell what another tenant's
// namespace holds.
func (j paramsJudge) paramsReady(ctx context.Context, refs []pnv1.ParametersRef, namespace string, generation int64) (*metav1.Condition, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	var missing, invalid []string
	for _, ref := range refs {
		k, ok := ownedParamsKind(ref)
		if !ok {
			return nil, nil
		}
		ns := ref.Namespace
		if !k.namespaced {
			ns = ""
		} else if ns == "" {
			ns = namespace
		}
		what := k.kind + " " + ref.Name
		if ns != "" {
			what = k.kind + " " + ns + "/" + ref.Name
		}
		if k.namespaced && ns == "" {
			invalid = append(invalid, what+": a "+k.kind+" is namespaced, set the ref's namespace")
			continue
		}
		if k.namespaced && namespace != "" && !j.mayUse(namespace, ns) {
			missing = append(missing, what+" (none that PodNetworkAttachments of namespace "+namespace+
				" may use: theirs are of their own namespace and of those the operator allows, --npwg-allowed-namespaces)")
			continue
		}
		var getter dynamic.ResourceInterface = j.client.Resource(k.resource)
		if ns != "" {
			getter = j.client.Resource(k.resource).Namespace(ns)
		}
		u, err := getter.Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, what)
			continue
		case err != nil:
			return nil, fmt.Errorf("read %s: %w", what, err)
		}
		if k.kind == v1alpha1.KindCNIConfig {
			o, err := cnipolicy.FromUnstructured(u)
			if err != nil {
				invalid = append(invalid, what+": "+err.Error())
				continue
			}
			if c := cnipolicy.Accept(o, j.policy); c.Status != metav1.ConditionTrue {
				invalid = append(invalid, what+" is not accepted ("+c.Reason+"): "+c.Message)
			}
		}
	}
	cond := &metav1.Condition{Type: pnv1.ConditionParamsReady, ObservedGeneration: generation}
	switch {
	case len(missing) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, pnv1.ReasonParamsMissing
		cond.Message = "parametersRefs name objects that do not exist: " + strings.Join(append(missing, invalid...), "; ")
	case len(invalid) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, pnv1.ReasonParamsInvalid
		cond.Message = "parametersRefs name objects not ready for use: " + strings.Join(invalid, "; ")
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, pnv1.ReasonParamsReady
		cond.Message = fmt.Sprintf("the %d objects of parametersRefs exist and are ready for use", len(refs))
	}
	return cond, nil
}

// podNetworkReady is a PodNetwork's Ready condition, given its
// ParamsReady condition (computed, or as another implementation wrote it;
// nil: absent).
func podNetworkReady(pn *pnv1.PodNetwork, params *metav1.Condition) metav1.Condition {
	cond := metav1.Condition{Type: pnv1.ConditionReady, ObservedGeneration: pn.Generation}
	switch {
	case !pn.Spec.IsEnabled():
		cond.Status, cond.Reason = metav1.ConditionFalse, pnv1.ReasonAdministrativelyDisabled
		cond.Message = "spec.enabled is false: no new pod attaches to it"
	case len(pn.Spec.ParametersRefs) > 0 && (params == nil || params.Status != metav1.ConditionTrue):
		cond.Status, cond.Reason = metav1.ConditionFalse, pnv1.ReasonParamsNotReady
		cond.Message = paramsNotReadyMessage(params)
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, pnv1.ReasonReady, "pods may attach to it"
	}
	return cond
}

// podNetworkAttachmentReady is a PodNetworkAttachment's Ready condition,
// given its ParamsReady condition and its PodNetwork (nil: it does not
// exist) with that one's Ready condition.
func podNetworkAttachmentReady(pna *pnv1.PodNetworkAttachment, params *metav1.Condition, pn *pnv1.PodNetwork, pnReady *metav1.Condition) metav1.Condition {
	cond := metav1.Condition{Type: pnv1.ConditionReady, ObservedGeneration: pna.Generation}
	switch {
	case pn == nil:
		cond.Status, cond.Reason = metav1.ConditionFalse, pnv1.ReasonPodNetworkNotReady
		cond.Message = fmt.Sprintf("PodNetwork %s does not exist", pna.Spec.PodNetworkName)
	case pnReady == nil || pnReady.Status != metav1.ConditionTrue:
		cond.Status, cond.Reason = metav1.ConditionFalse, pnv1.ReasonPodNetworkNotReady
		cond.Message = fmt.Sprintf("PodNetwork %s is not Ready", pn.Name)
		if pnReady != nil {
			cond.Message += fmt.Sprintf(" (%s: %s)", pnReady.Reason, pnReady.Message)
		}
	case len(pna.Spec.ParametersRefs) > 0 && (params == nil || params.Status != metav1.ConditionTrue):
		cond.Status, cond.Reason = metav1.ConditionFalse, pnv1.ReasonParamsNotReady
		cond.Message = paramsNotReadyMessage(params)
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, pnv1.ReasonReady
		cond.Message = fmt.Sprintf("pods may attach to PodNetwork %s through it", pn.Name)
	}
	return cond
}

func paramsNotReadyMessage(params *metav1.Condition) string {
	if params == nil {
		return "no ParamsReady condition yet: the owner of the parametersRefs' kinds has not judged them"
	}
	return "ParamsReady is false: " + params.Message
}

// setConditions sets want in conds and says whether anything changed
// (the transition time aside).
func setConditions(conds *[]metav1.Condition, want ...metav1.Condition) bool {
	changed := false
	for _, c := range want {
		if old := meta.FindStatusCondition(*conds, c.Type); old != nil && old.Status == c.Status && old.Reason == c.Reason &&
			old.Message == c.Message && old.ObservedGeneration == c.ObservedGeneration {
			continue
		}
		meta.SetStatusCondition(conds, c)
		changed = true
	}
	return changed
}
