package claimspec

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
)

// ClaimError is a claim fastpath cannot prepare as asked. It names the
// claim, and the request, device and fields where they are known. Its
// text says at most bounds.Problems of the problems (bounds.Join) and is
// at most bounds.MessageBytes.
type ClaimError struct {
	Claim   string // namespace/name
	Request string
	Device  string
	Errs    field.ErrorList
	Reason  string
}

func (e *ClaimError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "claim %s", e.Claim)
	if e.Request != "" {
		fmt.Fprintf(&b, ", request %q", e.Request)
	}
	if e.Device != "" {
		fmt.Fprintf(&b, ", device %s", e.Device)
	}
	b.WriteString(": ")
	if e.Reason != "" {
		b.WriteString(e.Reason)
	}
	if len(e.Errs) > 0 {
		if e.Reason != "" {
			b.WriteString(": ")
		}
		b.WriteString(bounds.Join(e.Errs))
	}
	return bounds.Message(b.String())
}

// FailFunc makes the error of a claim that cannot be prepared.
type FailFunc func(request, device, reason string, errs field.ErrorList) error

// Consumer is the one pod a claim serves: fastpath configures a device for
// exactly one pod.
func Consumer(claim *resourceapi.ResourceClaim, fail FailFunc) (claims.Pod, error) {
	if claim.Status.Allocation == nil {
		return claims.Pod{}, fail("", "", "not allocated", nil)
	}
	var pods []resourceapi.ResourceClaimConsumerReference
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" && r.APIGroup == "" {
			pods = append(pods, r)
		}
	}
	if len(pods) != 1 || len(claim.Status.ReservedFor) != 1 {
		return claims.Pod{}, fail("", "", fmt.Sprintf("reserved for %d consumers (%d pods); a device serves exactly one pod: use a ResourceClaimTemplate, or one claim per pod",
			len(claim.Status.ReservedFor), len(pods)), nil)
	}
	return claims.Pod{UID: pods[0].UID, Name: pods[0].Name}, nil
}

// CheckResult checks an allocated device of this node's driver: for a
// request of the claim's spec, from this node's pool.
func CheckResult(claim *resourceapi.ResourceClaim, res resourceapi.DeviceRequestAllocationResult, nodeName string, fail FailFunc) error {
	if _, ok := CountOf(claim, res.Request); !ok && !ExtendedResources(claim) {
		return fail(res.Request, "", "request not found in the claim's spec", nil)
	}
	if res.Pool != nodeName {
		return fail(res.Request, res.Device, fmt.Sprintf("allocated from pool %q, but this node's pool is %q", res.Pool, nodeName), nil)
	}
	return nil
}

// ExtendedResources says whether the claim is the one the scheduler made
// for a pod's extended resources (a DeviceClass's extendedResourceName in
// its containers' resources): a request per container and resource, named
// container-<i>-request-<j>, of as many devices as the pod asked for, and
// no config of the pod's own.
func ExtendedResources(claim *resourceapi.ResourceClaim) bool {
	return claim.Annotations[resourceapi.ExtendedResourceClaimAnnotation] == "true"
}

// RequestBase is the request of a request or subrequest name (req/sub).
func RequestBase(request string) string {
	base, _, _ := strings.Cut(request, "/")
	return base
}

// CNIClassName is the DeviceClass of the CNI DRA driver: a request of it
// carries a CNI config (v1alpha1.CNIConfig) that fastpath runs with libcni
// when the pod's sandbox starts.
const CNIClassName = "cni.networking.x-k8s.io"

// CNINetwork resolves the CNI config of a request: exactly one config of
// the driver applies, it decodes, and cnipolicy.Build accepts it. The
// errors' fields are the config's.
func CNINetwork(ctx context.Context, claim *resourceapi.ResourceClaim, request string, policy cnipolicy.Options, cc cnipolicy.Sources) (cnipolicy.Network, string, field.ErrorList) {
	var configs []int
	for i, cfg := range claim.Status.Allocation.Devices.Config {
		if cfg.Opaque != nil && cfg.Opaque.Driver == claims.DriverCNI && AppliesTo(cfg.Requests, request) {
			configs = append(configs, i)
		}
	}
	if len(configs) != 1 {
		return cnipolicy.Network{}, fmt.Sprintf("has %d CNI configs; every request of class %s needs exactly one, for driver %s", len(configs), CNIClassName, claims.DriverCNI), nil
	}
	i := configs[0]
	src := claim.Status.Allocation.Devices.Config[i]
	path := field.NewPath("config").Index(i).Key(string(src.Source)).Child("parameters")
	cfg, errs := v1alpha1.DecodeCNIConfig(src.Opaque.Parameters.Raw, path)
	if len(errs) > 0 {
		return cnipolicy.Network{}, "", errs
	}
	net, errs := cnipolicy.Build(ctx, cfg, cnipolicy.NetworkName(claim.Namespace, claim.Name, request), policy, cc)
	for _, e := range errs {
		e.Field = path.String() + "." + e.Field
	}
	return net, "", errs
}
