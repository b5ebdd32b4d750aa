package devices

import (
	"context"
	"fmt"

	"k8s.io/dynamic-resource-allocation/cel"
)

// Filter is the operator's CEL expression choosing which devices to
// publish. It runs in the same environment as DeviceClass selectors, so
// `device.attributes["fastpath.dev"].kind == "sriov-vf"` means the same in
// both places.
type Filter struct {
	expr   string
	result cel.CompilationResult
}

// NewFilter compiles expr. An empty expr is no filter (nil).
func NewFilter(expr string) (*Filter, error) {
	if expr == "" {
		return nil, nil
	}
	res := cel.GetCompiler(cel.Features{}).CompileCELExpression(expr, cel.Options{})
	if res.Error != nil {
		return nil, fmt.Errorf("filter %q: %s", expr, res.Error.Detail)
	}
	return &Filter{expr: expr, result: res}, nil
}

// Admits evaluates the filter on d. An evaluation error (a missing
// attribute, say) is returned, and the device is not admitted.
func (f *Filter) Admits(ctx context.Context, d Device) (bool, error) {
	ok, _, err := f.result.DeviceMatches(ctx, cel.Device{Driver: DriverName, Attributes: d.Attributes()})
	if err != nil {
		return false, fmt.Errorf("filter %q on device %s: %w", f.expr, d.Name, err)
	}
	return ok, nil
}
