package dra

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic"

	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
)

// CNIConfigResource is the resource of approved configs (kind CNIConfig).
var CNIConfigResource = schema.GroupVersionResource{Group: v1alpha1.CNIGroup, Version: v1alpha1.CNIVersion, Resource: v1alpha1.CNIConfigResource}

// ApprovedConfigs reads the operator's approved configs, the CNIConfig
// objects claims name with configName.
type ApprovedConfigs interface {
	Get(ctx context.Context, name string) (*v1alpha1.CNIConfigObject, error)
}

// NewApprovedConfigs reads approved configs from the API server.
func NewApprovedConfigs(client dynamic.Interface) ApprovedConfigs { return apiApproved{client} }

type apiApproved struct{ client dynamic.Interface }

func (a apiApproved) Get(ctx context.Context, name string) (*v1alpha1.CNIConfigObject, error) {
	u, err := a.client.Resource(CNIConfigResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return CNIConfigFromUnstructured(u)
}

// CNIConfigFromUnstructured decodes an approved config, strictly.
func CNIConfigFromUnstructured(u *unstructured.Unstructured) (*v1alpha1.CNIConfigObject, error) {
	data, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	o, errs := v1alpha1.DecodeCNIConfigObject(data, field.NewPath(""))
	if len(errs) > 0 {
		return nil, fmt.Errorf("CNIConfig %s: %w", u.GetName(), errs.ToAggregate())
	}
	return &o, nil
}

// ApprovedConfigSet is a fixed set of approved configs, by name.
type ApprovedConfigSet map[string]*v1alpha1.CNIConfigObject

// Get returns the config name; an error saying it is not in the set if it
// is not.
func (s ApprovedConfigSet) Get(_ context.Context, name string) (*v1alpha1.CNIConfigObject, error) {
	if o, ok := s[name]; ok {
		return o, nil
	}
	return nil, errApprovedUnknown{name}
}

// AcceptCNIConfig says whether fastpathd, with policy, accepts an approved
// config: the condition Accepted for its status (CNIConfigProblems).
func AcceptCNIConfig(o *v1alpha1.CNIConfigObject, policy CNIPolicy) metav1.Condition {
	cond := metav1.Condition{Type: v1alpha1.CNIConfigAccepted, ObservedGeneration: o.Generation}
	errs := CNIConfigProblems(o, policy)
	for _, e := range errs {
		if e.Origin == originAllowlist {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonCNIPluginNotAllowed, errs.ToAggregate().Error()
			return cond
		}
	}
	if len(errs) > 0 {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonCNIConfigInvalid, errs.ToAggregate().Error()
		return cond
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonCNIConfigAccepted
	cond.Message = fmt.Sprintf("fastpathd runs it: plugins %v on the allowlist, the conflist parses", pluginNames(o.Spec))
	return cond
}

// CNIConfigProblems is what keeps fastpathd, with policy, from running an
// approved config, checking what needs no claim or device: the object's
// shape, the allowlist, and libcni's parse of the conflist it makes (with
// placeholders for device attributes, slice fields and ConfigMap keys).
// Fields are the object's (spec.plugins[0].type).
func CNIConfigProblems(o *v1alpha1.CNIConfigObject, policy CNIPolicy) field.ErrorList {
	if errs := o.Validate(); len(errs) > 0 {
		return errs
	}
	claim := v1alpha1.CNIConfig{IfName: o.Spec.IfName, ConfigName: o.Name}
	if claim.IfName == "" {
		claim.IfName = "net1" // claims set it
	}
	c := cniContext{ctx: context.Background(), approved: ApprovedConfigSet{o.Name: o}, static: true}
	policy.RequireApproved = false
	_, errs := buildConflist(claim, "cniconfig-"+o.Name, policy, c)
	prefix := field.NewPath("configName").Key(o.Name).String() + "."
	for _, e := range errs {
		e.Field = strings.TrimPrefix(e.Field, prefix)
	}
	return errs
}

func pluginNames(c v1alpha1.CNIConfig) []string {
	var out []string
	for _, p := range c.Plugins {
		conf := maps.Clone(p.Config)
		if conf == nil {
			conf = map[string]any{}
		}
		conf["type"] = p.Type
		for _, t := range cnipolicy.Inspect(conf).Types {
			out = append(out, t.Name)
		}
	}
	return out
}
