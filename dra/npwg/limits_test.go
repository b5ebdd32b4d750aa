package npwg

import (
	"strings"
	"testing"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		name                               string
		limits                             Limits
		selected, podNetworks, claimIfaces int
		want                               string // the error's beginning; "": within
	}{
		{"the defaults", Limits{}, DefaultMaxNetworks, 0, DefaultMaxInterfaces - DefaultMaxNetworks, ""},
		{"a network more", Limits{}, DefaultMaxNetworks, 1, 0,
			"metadata.annotations[k8s.v1.cni.cncf.io/networks]: Too many: 33: the pod selects 33 networks (32 with k8s.v1.cni.cncf.io/networks, 1 with network.fastpath.dev/networks)"},
		{"PodNetworks alone", Limits{Networks: 1}, 0, 2, 0, "metadata.annotations[network.fastpath.dev/networks]: Too many: 2"},
		{"an interface more", Limits{}, 1, 0, DefaultMaxInterfaces, "metadata.annotations[k8s.v1.cni.cncf.io/networks]: Too many: 65: the pod would have 65 interfaces (1 of its networks, 64 of its DRA claims)"},
		// Without networks, the claims' interfaces are the DRA API's to bound.
		{"claims alone", Limits{Interfaces: 1}, 0, 0, 100, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := tc.limits.Check(tc.selected, tc.podNetworks, tc.claimIfaces)
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("refused: %v", errs)
			case tc.want != "" && (len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), tc.want)):
				t.Errorf("errors %v, want %q", errs, tc.want)
			}
		})
	}
}

// A selection of bounds.AnnotationBytes is read; one byte more is refused
// unread, without being repeated.
func TestParseNetworksTooLong(t *testing.T) {
	value := "net-a" + strings.Repeat(" ", bounds.AnnotationBytes-len("net-a"))
	if atts, errs := ParseNetworks("default", value); len(errs) > 0 || len(atts) != 1 {
		t.Errorf("%d bytes: %v, %v", len(value), atts, errs)
	}
	atts, errs := ParseNetworks("default", value+" ")
	if len(atts) != 0 || len(errs) != 1 || errs[0].Error() !=
		"metadata.annotations[k8s.v1.cni.cncf.io/networks]: Too long: is 65537 bytes, more than the 65536 a network selection may have: select fewer networks" {
		t.Errorf("%d bytes: %v, %v", len(value)+1, atts, errs)
	}
}
