package migrate

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ncv1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
)

// The attributes of a DeviceAttributes that give a resource name.
const (
	multusResourceName resourceapi.QualifiedName = "k8s.cni.cncf.io/resourceName"
	draResourceName    resourceapi.QualifiedName = "sriovnetwork.k8snetworkplumbingwg.io/resourceName"
)

// draPolicies takes dra-driver-sriov's policies into the groups: the VFs
// their configs select are the ones published (the driver publishes no
// other), named after the resource name their DeviceAttributes give.
func (c *converter) draPolicies(policies []*resourcePolicy, attrs []*deviceAttributes) {
	used := map[*deviceAttributes]bool{}
	for _, p := range policies {
		at := refOf("SriovResourcePolicy", p.ObjectMeta)
		sels := c.nodeSelectors(at, p.Spec.NodeSelector)
		if len(p.Spec.Configs) == 0 {
			c.r.add(at, "spec.configs", "none: the policy publishes no device, and nothing is written for it")
		}
		for i, cfg := range p.Spec.Configs {
			path := fmt.Sprintf("spec.configs[%d]", i)
			filter := c.draFilter(at, path, cfg.ResourceFilters)
			var name string
			if cfg.DeviceAttributesSelector != nil {
				sel, err := metav1.LabelSelectorAsSelector(cfg.DeviceAttributesSelector)
				if err != nil {
					c.r.add(at, path+".deviceAttributesSelector", fmt.Sprintf("%v: no attributes applied", err))
				} else {
					// Merged by name, the last's value winning, as the
					// driver merges them; only the policy's namespace's.
					merged := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
					from := map[resourceapi.QualifiedName]*deviceAttributes{}
					for _, a := range attrs {
						if a.Namespace == p.Namespace && sel.Matches(labels.Set(a.Labels)) {
							used[a] = true
							for k, v := range a.Spec.Attributes {
								merged[k], from[k] = v, a
							}
						}
					}
					name = c.draResourceNameOf(merged, from)
				}
			}
			for _, s := range sels {
				g := c.group(s, at)
				g.draFilters = append(g.draFilters, filter)
				if name != "" {
					g.draNames = append(g.draNames, ncv1.ResourceName{Name: name, Filter: filter})
				}
			}
		}
	}
	for _, a := range attrs {
		at := refOf("DeviceAttributes", a.ObjectMeta)
		if !used[a] {
			c.r.add(at, "", "selected by no SriovResourcePolicy config among the inputs: nothing to carry over")
			continue
		}
		keys := make([]string, 0, len(a.Spec.Attributes))
		for k := range a.Spec.Attributes {
			keys = append(keys, string(k))
		}
		slices.Sort(keys)
		for _, k := range keys {
			if k == string(multusResourceName) || k == string(draResourceName) {
				continue
			}
			c.r.add(at, "spec.attributes["+k+"]", "no equivalent: fastpath publishes fixed attributes (pfName, pfPciAddress, vfID, pciVendor, pciDevice, pciAddress, resource.kubernetes.io/numaNode, pcieRoot, pciBusID, k8s.cni.cncf.io/resourceName): select the devices with CEL on those")
		}
	}
}

// draResourceNameOf is the resource name the attributes give: fastpath's
// is k8s.cni.cncf.io/resourceName, and a name must have a domain.
func (c *converter) draResourceNameOf(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, from map[resourceapi.QualifiedName]*deviceAttributes) string {
	key := multusResourceName
	if _, ok := attrs[key]; !ok {
		key = draResourceName
	}
	v, ok := attrs[key]
	if !ok {
		return ""
	}
	at := refOf("DeviceAttributes", from[key].ObjectMeta)
	field := "spec.attributes[" + string(key) + "]"
	if v.StringValue == nil {
		c.r.add(at, field, "not a string: left out")
		return ""
	}
	old := *v.StringValue
	if key == draResourceName {
		if other, ok := attrs[multusResourceName]; ok && other.StringValue != nil && *other.StringValue != old {
			c.r.add(at, field, fmt.Sprintf("%q differs from %s %q, which fastpath publishes: left out", old, multusResourceName, *other.StringValue))
		}
	}
	name := old
	if !strings.Contains(name, "/") {
		name = c.opts.ResourcePrefix + "/" + name
	}
	if err := v1alpha1.ValidResourceName(name); err != nil {
		c.r.add(at, field, fmt.Sprintf("%q: %v: left out", name, err))
		return ""
	}
	domain, attrName, _ := strings.Cut(string(key), "/")
	c.r.add(at, field, fmt.Sprintf("the devices' resource name is %s (attribute k8s.cni.cncf.io/resourceName): a claim selecting device.attributes[%q].%s == %q selects device.attributes[\"k8s.cni.cncf.io\"].resourceName == %q instead", name, domain, attrName, old, name))
	return name
}

// draFilter is the CEL expression of a config's resource filters: any
// of them, each all of its lists.
func (c *converter) draFilter(at ref, path string, filters []resourceFilter) string {
	var alts []string
	for j, f := range filters {
		fp := fmt.Sprintf("%s.resourceFilters[%d]", path, j)
		var conds []string
		for _, in := range []struct {
			attr string
			vals []string
		}{{"pciVendor", f.Vendors}, {"pciDevice", f.Devices}, {"pciAddress", f.PciAddresses}, {"pfName", f.PfNames}, {"pfPciAddress", f.PfPciAddresses}} {
			if len(in.vals) > 0 {
				conds = append(conds, attr(in.attr)+" in "+celList(in.vals))
			}
		}
		if len(f.Drivers) > 0 {
			c.r.add(at, fp+".drivers", "dra-driver-sriov does not apply it either: left out")
		}
		if f.LinkType != "" {
			c.r.add(at, fp+".linkType", "no equivalent: fastpath publishes no link type, and the filter admits VFs of either: name the PFs (pfNames) to tell them apart")
		}
		if len(conds) == 0 {
			// A filter of nothing admits every VF.
			return isVF
		}
		alts = append(alts, strings.Join(conds, " && "))
	}
	if len(alts) == 0 {
		return isVF
	}
	return isVF + " && " + paren(orOf(alts))
}

// nodeSelectors are a policy's node selector terms as label selectors,
// each of a FastpathNodeConfig of its own (terms are ORed); none selects
// every node.
func (c *converter) nodeSelectors(at ref, ns *corev1.NodeSelector) []metav1.LabelSelector {
	if ns == nil || len(ns.NodeSelectorTerms) == 0 {
		return []metav1.LabelSelector{{}}
	}
	var out []metav1.LabelSelector
	for i, t := range ns.NodeSelectorTerms {
		path := fmt.Sprintf("spec.nodeSelector.nodeSelectorTerms[%d]", i)
		if len(t.MatchFields) > 0 {
			c.r.add(at, path+".matchFields", "no equivalent: a FastpathNodeConfig selects nodes by label: the term's nodes get nothing; select them by label (kubernetes.io/hostname)")
			continue
		}
		var sel metav1.LabelSelector
		ok := true
		for _, e := range t.MatchExpressions {
			switch op := metav1.LabelSelectorOperator(e.Operator); op {
			case metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist:
				sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: e.Key, Operator: op, Values: e.Values})
			default:
				c.r.add(at, path, fmt.Sprintf("operator %s: no equivalent in a label selector: the term's nodes get nothing", e.Operator))
				ok = false
			}
		}
		if ok {
			out = append(out, sel)
		}
	}
	if len(ns.NodeSelectorTerms) > 1 {
		c.r.add(at, "spec.nodeSelector", "several terms: each is a FastpathNodeConfig of its own")
	}
	return out
}
