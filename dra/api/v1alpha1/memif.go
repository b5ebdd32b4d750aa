package v1alpha1

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// LoadMemifConfig reads, decodes (strictly: unknown, misspelt and duplicate
// fields are errors), defaults and validates the operator's memif config
// file (--memif-config). Every error names the file and the field.
func LoadMemifConfig(path string) (*MemifConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("memif config: %w", err)
	}
	return parseMemifConfig(path, data)
}

// parseMemifConfig is LoadMemifConfig of data, read from path.
func parseMemifConfig(path string, data []byte) (*MemifConfig, error) {
	c, errs := DecodeMemifConfig(data, field.NewPath("memifConfig"))
	if len(errs) == 0 {
		c.Default()
		errs = c.Validate(field.NewPath("memifConfig"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("memif config %s: %w", path, bounds.Aggregate(errs))
	}
	return &c, nil
}
