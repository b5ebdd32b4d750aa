package cnipolicy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// ApprovedConfigs reads the operator's approved configs, the CNIConfig
// objects claims name with configName.
type ApprovedConfigs interface {
	Get(ctx context.Context, name string) (*v1alpha1.CNIConfigObject, error)
}

// FromUnstructured decodes an approved config, strictly.
func FromUnstructured(u *unstructured.Unstructured) (*v1alpha1.CNIConfigObject, error) {
	data, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	o, errs := v1alpha1.DecodeCNIConfigObject(data, field.NewPath(""))
	if len(errs) > 0 {
		return nil, fmt.Errorf("CNIConfig %s: %w", u.GetName(), bounds.Aggregate(errs))
	}
	return &o, nil
}

// ApprovedSet is a fixed set of approved configs, by name.
type ApprovedSet map[string]*v1alpha1.CNIConfigObject

// LoadApproved reads approved configs from files, a CNIConfig object (YAML
// or JSON) a file.
func LoadApproved(paths ...string) (ApprovedSet, error) {
	set := ApprovedSet{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		o, errs := v1alpha1.DecodeCNIConfigObject(data, field.NewPath(""))
		if len(errs) > 0 {
			return nil, fmt.Errorf("%s: %w", p, bounds.Aggregate(errs))
		}
		set[o.Name] = &o
	}
	return set, nil
}

// Get returns the config name; an error saying it is not in the set if it
// is not.
func (s ApprovedSet) Get(_ context.Context, name string) (*v1alpha1.CNIConfigObject, error) {
	if o, ok := s[name]; ok {
		return o, nil
	}
	return nil, errApprovedUnknown{name}
}

// Accept says whether fastpathd, with policy, accepts an approved
// config: the condition Accepted for its status (ConfigProblems).
func Accept(o *v1alpha1.CNIConfigObject, policy Options) metav1.Condition {
	cond := metav1.Condition{Type: v1alpha1.CNIConfigAccepted, ObservedGeneration: o.Generation}
	errs := ConfigProblems(o, policy)
	for _, e := range errs {
		if e.Origin == originAllowlist {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonCNIPluginNotAllowed, bounds.Join(errs)
			return cond
		}
	}
	if len(errs) > 0 {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonCNIConfigInvalid, bounds.Join(errs)
		return cond
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonCNIConfigAccepted
	cond.Message = fmt.Sprintf("fastpathd runs it: plugins %v on the allowlist, the conflist parses", pluginNames(o.Spec))
	return cond
}

// ConfigProblems is what keeps fastpathd, with policy, from running an
// approved config, checking what needs no claim or device: the object's
// shape, the allowlist, and libcni's parse of the conflist it makes (with
// placeholders for device attributes, slice fields and ConfigMap keys).
// Fields are the object's (spec.plugins[0].type).
func ConfigProblems(o *v1alpha1.CNIConfigObject, policy Options) field.ErrorList {
	if errs := o.Validate(); len(errs) > 0 {
		return errs
	}
	claim := v1alpha1.CNIConfig{IfName: o.Spec.IfName, ConfigName: o.Name}
	if claim.IfName == "" {
		claim.IfName = "net1" // claims set it
	}
	c := Sources{Approved: ApprovedSet{o.Name: o}, Static: true}
	policy.RequireApproved = false
	_, errs := Build(context.Background(), claim, "cniconfig-"+o.Name, policy, c)
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
		for _, t := range Inspect(conf).Types {
			out = append(out, t.Name)
		}
	}
	return out
}
