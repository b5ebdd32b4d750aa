package npwg

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrNotAllowed is the error of a pod selecting a network the operator
// does not let it use (§7.4: the pod's network operation fails).
var ErrNotAllowed = errors.New("network not allowed")

// AllNamespaces in Policy.AllowedNamespaces lets pods use the networks of
// every namespace.
const AllNamespaces = "*"

// Policy is the operator's rule for which NetworkAttachmentDefinitions a
// pod may select (§7.4). A pod may always use those of its own namespace,
// which is where an element that names no namespace looks (§4.1.1,
// §4.1.2.1.1); those of another namespace only when that namespace is
// allowed. No namespace is special: the one called "default" is allowed
// only when it is listed.
type Policy struct {
	// AllowedNamespaces are the namespaces whose networks pods of every
	// namespace may use; AllNamespaces allows all.
	AllowedNamespaces []string
}

// Validate says why the policy is not one an operator can mean, or nil.
func (p Policy) Validate() error {
	var errs []error
	for _, ns := range p.AllowedNamespaces {
		if ns == AllNamespaces {
			continue
		}
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("allowed namespace %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// Check says why a pod of podNamespace may not use the attachment's
// network, wrapping ErrNotAllowed, or nil.
func (p Policy) Check(podNamespace string, att *Attachment) error {
	ns := att.Namespace
	if ns == "" || ns == podNamespace || slices.Contains(p.AllowedNamespaces, AllNamespaces) || slices.Contains(p.AllowedNamespaces, ns) {
		return nil
	}
	allowed := "none"
	if len(p.AllowedNamespaces) > 0 {
		allowed = strings.Join(p.AllowedNamespaces, ", ")
	}
	return fmt.Errorf("%w: network %s: a pod of namespace %s may use the networks of its own namespace and of those the operator allows (%s)",
		ErrNotAllowed, att.Network(), podNamespace, allowed)
}
