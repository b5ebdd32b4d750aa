// Package filter compiles the operator's CEL expressions over devices:
// --filter, --share and --resource-name. They run in the environment of a
// DeviceClass selector, so that
// `device.attributes["fastpath.dev"].kind == "sriov-vf"` means the same in
// both places. Discovery takes them as devices.Selector, and does not link
// the CEL interpreter itself.
package filter

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

// Expression is a compiled CEL expression over a device.
type Expression struct {
	expr   string
	result cel.CompilationResult
}

// Compile compiles expr, which must yield a bool.
func Compile(expr string) (*Expression, error) {
	if expr == "" {
		return nil, errors.New("empty CEL expression")
	}
	res := cel.GetCompiler(cel.Features{}).CompileCELExpression(expr, cel.Options{})
	if res.Error != nil {
		return nil, fmt.Errorf("filter %q: %s", expr, res.Error.Detail)
	}
	return &Expression{expr: expr, result: res}, nil
}

// Admits evaluates the expression on a device of driver with attrs. An
// evaluation error (a missing attribute, say) is returned, and the device
// is not admitted.
func (e *Expression) Admits(ctx context.Context, driver string, attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) (bool, error) {
	ok, _, err := e.result.DeviceMatches(ctx, cel.Device{Driver: driver, Attributes: attrs})
	if err != nil {
		return false, fmt.Errorf("filter %q: %w", e.expr, err)
	}
	return ok, nil
}

// String is the expression's source.
func (e *Expression) String() string { return e.expr }
