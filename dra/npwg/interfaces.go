package npwg

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// generatedPrefix is the prefix of the interface names AssignInterfaces
// chooses: net1, net2, ...
const generatedPrefix = "net"

// AssignInterfaces gives every attachment that asks for no interface name
// one of its own, the first of net1, net2, ... that no other attachment of
// the pod has or asks for, so that each attachment to the same network is
// a tuple of its own (§4.2.1). taken are the names the pod's other
// attachments have (the cluster default network's interface, those of its
// DRA claims); "lo" is always taken. It fails, changing nothing, when
// CheckInterfaces finds a conflict; the error is the aggregate of
// CheckInterfaces' errors (bounds.Aggregate). Names chosen by an earlier call are chosen
// again; taken is not modified.
func AssignInterfaces(atts []Attachment, taken map[string]bool) error {
	owner, errs := interfaceOwners(atts, taken)
	if len(errs) > 0 {
		return bounds.Aggregate(errs)
	}
	names := make([]string, len(atts))
	n := 1
	for i := range atts {
		a := &atts[i]
		if a.InterfaceRequest != "" && !a.GeneratedInterface {
			continue
		}
		for {
			name := generatedPrefix + strconv.Itoa(n)
			n++
			if _, used := owner[name]; !used {
				names[i], owner[name] = name, i
				break
			}
		}
	}
	for i, name := range names {
		if name != "" {
			atts[i].InterfaceRequest, atts[i].GeneratedInterface = name, true
		}
	}
	return nil
}

// CheckInterfaces finds the interface names attachments ask for that the
// pod cannot give them: names that are not valid, that are taken (see
// AssignInterfaces) or that another attachment asks for too
// (§4.1.2.1.5). The errors' paths name the elements of the selection
// annotation.
func CheckInterfaces(atts []Attachment, taken map[string]bool) field.ErrorList {
	_, errs := interfaceOwners(atts, taken)
	return errs
}

// interfaceOwners maps the names taken and asked for to the attachments
// asking for them (their index in atts; -1 for those taken).
func interfaceOwners(atts []Attachment, taken map[string]bool) (map[string]int, field.ErrorList) {
	path := NetworksPath()
	owner := map[string]int{"lo": -1}
	for name, ok := range taken {
		if ok {
			owner[name] = -1
		}
	}
	var errs field.ErrorList
	for i := range atts {
		a := &atts[i]
		if a.InterfaceRequest == "" || a.GeneratedInterface {
			continue
		}
		p := path.Index(a.Index).Child("interface")
		if err := ValidInterfaceName(a.InterfaceRequest); err != nil {
			errs = append(errs, field.Invalid(p, a.InterfaceRequest, "a Linux interface name "+err.Error()))
			continue
		}
		switch j, used := owner[a.InterfaceRequest]; {
		case used && j < 0:
			errs = append(errs, field.Invalid(p, a.InterfaceRequest,
				fmt.Sprintf("the pod has an interface of this name already (the loopback, the cluster default network's, or a DRA claim's); ask network %s for another", a.Network())))
		case used:
			e := field.Duplicate(p, a.InterfaceRequest)
			e.Detail = fmt.Sprintf("element [%d] (network %s) asks for this interface name too; interface names are unique in the pod", atts[j].Index, atts[j].Network())
			errs = append(errs, e)
		default:
			owner[a.InterfaceRequest] = i
		}
	}
	return owner, errs
}
