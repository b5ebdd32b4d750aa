package validate

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
	"github.com/fastpath-dra/fastpath/dra/claimspec"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
)

// Check checks manifests as Prepare checks claims, short of what
// needs the allocated devices (fastpathd validate): every opaque config of
// fastpath.dev (decoded, defaulted, validated, over its DeviceClass's) and
// of the CNI driver (decoded, validated, built by the node's policy with
// placeholders for device attributes, slice fields and ConfigMap keys),
// a config that can be given to each device of a request of several
// (claimspec.Expand), exactly one device per CNI request and one CNI
// config for it, and interface names unique within a claim.
type Check struct {
	Policy cnipolicy.Options
	// Classes are the DeviceClasses known: their configs apply under the
	// claims', and their selectors say which driver serves a request.
	// Without its class, a request's driver is known by the class name:
	// cni.networking.x-k8s.io, or a name ending in .fastpath.dev.
	// CheckManifests lays the chart's under those given (the cluster's,
	// for the admission webhook), and the inputs' over them.
	Classes map[string]*resourceapi.DeviceClass
	// Approved are the approved configs known (the inputs'); a claim
	// naming another is checked short of it.
	Approved cnipolicy.ApprovedSet
	// CompileFilter compiles a CEL expression over devices, as the node
	// does (fastpathd links devices/filter; the checks do not); nil: the
	// expressions are not compiled.
	CompileFilter func(expr string) error
}

// Problem is one thing wrong: Err.Field is the field's full path in the
// object; Request is the request it is about, "" for none.
type Problem struct {
	Request string
	Err     *field.Error
}

// Interface is an interface a claim gives its pod.
type Interface struct {
	Name, Request string
}

// ChartDeviceClassConfigs are the DeviceClasses the chart installs for
// fastpath.dev (deploy/deviceclasses.yaml) and the config each sets, with
// the chart's defaults: each pins its mode (the shared class has no
// sharedParent: a claim of it gets the API's defaults); memif sets none.
var ChartDeviceClassConfigs = map[string]*v1alpha1.InterfaceConfig{
	"netdev.fastpath.dev":   chartConfig(v1alpha1.ModeNetdev),
	"afxdp.fastpath.dev":    chartConfig(v1alpha1.ModeAFXDP),
	"vfio.fastpath.dev":     chartConfig(v1alpha1.ModeVFIO),
	"rdma.fastpath.dev":     {Mode: v1alpha1.ModeNetdev, RDMA: &v1alpha1.RDMAConfig{}, Pinned: []string{"mode"}},
	"memif.fastpath.dev":    nil,
	"delegate.fastpath.dev": chartConfig(v1alpha1.ModeDelegate),
	"shared.fastpath.dev":   {Mode: v1alpha1.ModeMacvlan, Pinned: []string{"mode"}},
}

func chartConfig(mode string) *v1alpha1.InterfaceConfig {
	return &v1alpha1.InterfaceConfig{Mode: mode, Pinned: []string{"mode"}}
}

// ChartDeviceClasses are the chart's DeviceClasses, with its defaults, as
// far as a static check needs them (the driver and the config): for claims
// whose class is not among fastpathd validate's inputs.
func ChartDeviceClasses() map[string]*resourceapi.DeviceClass {
	out := map[string]*resourceapi.DeviceClass{}
	for name, cfg := range ChartDeviceClassConfigs {
		c := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + devices.DriverName + `"`}}}}}
		if cfg != nil {
			data, _ := json.Marshal(cfg) // a config always marshals
			c.Spec.Config = []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: devices.DriverName, Parameters: runtime.RawExtension{Raw: data},
			}}}}
		}
		out[name] = c
	}
	out[claimspec.CNIClassName] = &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: claimspec.CNIClassName}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + claims.DriverCNI + `"`}}}}}
	return out
}

// chartClasses are ChartDeviceClasses, made once: the checks read them
// and never change them, and the admission webhook judges every object
// over them.
var chartClasses = sync.OnceValue(ChartDeviceClasses)

var driverSelector = regexp.MustCompile(`device\.driver\s*==\s*"([^"]+)"`)

// DriverOf is the driver serving the class's requests: by the class's
// selectors or configs when it is known, by its name otherwise; "" when
// neither says.
func (s Check) DriverOf(class string) string {
	if c, ok := s.Classes[class]; ok {
		for _, sel := range c.Spec.Selectors {
			if sel.CEL != nil {
				if m := driverSelector.FindStringSubmatch(sel.CEL.Expression); m != nil {
					return m[1]
				}
			}
		}
		for _, cfg := range c.Spec.Config {
			if cfg.Opaque != nil && (cfg.Opaque.Driver == devices.DriverName || cfg.Opaque.Driver == claims.DriverCNI) {
				return cfg.Opaque.Driver
			}
		}
	}
	switch {
	case class == claimspec.CNIClassName:
		return claims.DriverCNI
	case strings.HasSuffix(class, "."+devices.DriverName):
		return devices.DriverName
	}
	return ""
}

// candidate is a request or subrequest a device may be allocated for.
type candidate struct {
	name, class string
	path        *field.Path // of the request in the spec
	admin       bool        // adminAccess
}

// adminProblems are what is wrong with an adminAccess request of
// fastpath.dev: it gets a read-only view of devices other pods may hold,
// so it takes no config (it changes nothing), and the claim's other
// requests of fastpath.dev must be admin ones too (Prepare gives a claim
// views or devices, not both).
func (s Check) adminProblems(spec resourceapi.ResourceClaimSpec, cands []candidate, cand candidate, devs *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, c := range spec.Devices.Config {
		if c.Opaque != nil && c.Opaque.Driver == devices.DriverName && claimspec.AppliesTo(c.Requests, cand.name) {
			errs = append(errs, field.Forbidden(devs.Child("config").Index(i), fmt.Sprintf(
				"request %q has adminAccess: it gets a read-only view of its devices, which no config changes", cand.name)))
		}
	}
	for _, other := range cands {
		if !other.admin && claimspec.RequestBase(other.name) != claimspec.RequestBase(cand.name) && s.DriverOf(other.class) == devices.DriverName {
			errs = append(errs, field.Forbidden(cand.path.Child("adminAccess"), fmt.Sprintf(
				"request %q does not have adminAccess: a claim gets either views of devices other pods hold or devices of its own; claim them apart", other.name)))
			break
		}
	}
	return errs
}

// Claim checks a claim's spec at path in an object (spec of a
// ResourceClaim, spec.spec of a template) and returns its problems and
// the interfaces it gives its pod.
func (s Check) Claim(namespace, name string, spec resourceapi.ResourceClaimSpec, path *field.Path) ([]Problem, []Interface) {
	devs := path.Child("devices")
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: spec,
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}}}
	// The claim's configs keep their indexes; the classes' come after.
	configPaths := map[int]string{}
	for i, c := range spec.Devices.Config {
		claim.Status.Allocation.Devices.Config = append(claim.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
			Source: resourceapi.AllocationConfigSourceClaim, Requests: c.Requests, DeviceConfiguration: c.DeviceConfiguration})
		configPaths[i] = devs.Child("config").Index(i).Child("opaque", "parameters").String()
	}
	var cands []candidate
	for i, r := range spec.Devices.Requests {
		rp := devs.Child("requests").Index(i)
		if r.Exactly != nil {
			cands = append(cands, candidate{r.Name, r.Exactly.DeviceClassName, rp.Child("exactly"), r.Exactly.AdminAccess != nil && *r.Exactly.AdminAccess})
		}
		for j, sub := range r.FirstAvailable {
			cands = append(cands, candidate{r.Name + "/" + sub.Name, sub.DeviceClassName, rp.Child("firstAvailable").Index(j), false})
		}
	}
	for _, cand := range cands {
		class, ok := s.Classes[cand.class]
		if !ok {
			continue
		}
		for j, c := range class.Spec.Config {
			idx := len(claim.Status.Allocation.Devices.Config)
			claim.Status.Allocation.Devices.Config = append(claim.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
				Source: resourceapi.AllocationConfigSourceClass, Requests: []string{cand.name}, DeviceConfiguration: c.DeviceConfiguration})
			configPaths[idx] = fmt.Sprintf("(DeviceClass %s) spec.config[%d].opaque.parameters", cand.class, j)
		}
	}

	var problems []Problem
	// Each candidate's problems are kept to the bound, the rest counted:
	// what a claim's judgement holds is bounded whatever its configs hold.
	add := func(request string, errs field.ErrorList, at string) {
		for _, e := range bounds.Keep(errs) {
			e.Field = s.fieldIn(e.Field, configPaths, at)
			problems = append(problems, Problem{Request: request, Err: e})
		}
	}
	var ifaces []Interface
	cc := cnipolicy.Sources{Approved: s.Approved, Namespace: namespace, Static: true}
	for _, cand := range cands {
		driver := s.DriverOf(cand.class)
		if driver != devices.DriverName && driver != claims.DriverCNI {
			continue
		}
		// The claim the scheduler makes for a pod's extended resources asks
		// for as many devices as the pod: each is named net1, net2, ...
		extended := claimspec.ExtendedResources(claim)
		count, found := claimspec.CountOf(claim, cand.name)
		switch {
		case extended:
			count = claimspec.Count{N: 1}
		case !found:
			add(cand.name, field.ErrorList{field.Invalid(cand.path, cand.name, "request not found in the claim's spec")}, "")
			continue
		case driver == claims.DriverCNI && count.Many():
			add(cand.name, field.ErrorList{field.Invalid(cand.path.Child("count"), "", claimspec.ExactlyOne(claim, cand.name))}, "")
			continue
		case cand.admin && driver == claims.DriverCNI:
			add(cand.name, field.ErrorList{field.Forbidden(cand.path.Child("adminAccess"), fmt.Sprintf(
				"driver %s runs the claim's CNI config on its device: it gives no view of a device another pod holds", driver))}, "")
			continue
		case cand.admin:
			add(cand.name, s.adminProblems(spec, cands, cand, devs), "")
			continue
		}
		last := s.lastConfig(claim, cand.name, driver, configPaths)
		switch driver {
		case devices.DriverName:
			cfg, errs := claimspec.ResolveConfig(claim, cand.name)
			if len(errs) > 0 {
				add(cand.name, errs, "")
				continue
			}
			// Each device of a request of several is checked as the last
			// would be configured: the longest name; its interface names
			// are all of them.
			total := int(count.N)
			if count.All {
				total = claimspec.MaxDevices
			}
			if total > 1 {
				if _, _, errs := claimspec.Expand(cfg, claimspec.RequestBase(cand.name), count, total-1, total); len(errs) > 0 {
					add(cand.name, errs, last)
					continue
				}
			}
			if strings.HasPrefix(cand.class, "memif.") {
				_, errs = claimspec.ConfigFor(cfg, claimspec.RequestBase(cand.name), devices.Device{Kind: devices.KindMemif})
				add(cand.name, errs, last)
				continue
			}
			names := make([]string, 0, total)
			for i := range max(total, 1) {
				c, ifName, _ := claimspec.Expand(cfg, claimspec.RequestBase(cand.name), count, i, max(total, 1))
				c.Default(ifName)
				if i == max(total, 1)-1 {
					if errs := c.Validate(); len(errs) > 0 {
						add(cand.name, errs, last)
						names = nil
						break
					}
				}
				if c.Interface != nil && c.Mode != v1alpha1.ModeVFIO {
					names = append(names, c.Interface.Name)
				}
			}
			for _, n := range names {
				ifaces = append(ifaces, Interface{n, cand.name})
			}
		case claims.DriverCNI:
			net, reason, errs := claimspec.CNINetwork(context.Background(), claim, cand.name, s.Policy, cc)
			if reason != "" {
				add(cand.name, field.ErrorList{field.Invalid(devs.Child("config"), "", reason)}, "")
				continue
			}
			if len(errs) > 0 {
				add(cand.name, errs, "")
				continue
			}
			if net.IfName != "" {
				ifaces = append(ifaces, Interface{net.IfName, cand.name})
			}
		}
	}
	seen := map[string]string{}
	for _, i := range ifaces {
		if other, dup := seen[i.Name]; dup && claimspec.RequestBase(other) != claimspec.RequestBase(i.Request) {
			problems = append(problems, Problem{Request: i.Request, Err: field.Duplicate(devs.Child("config"),
				fmt.Sprintf("interface %s (already used by request %q)", i.Name, other))})
			continue
		}
		seen[i.Name] = i.Request
	}
	return problems, ifaces
}

// lastConfig is the path of the last config of driver that applies to
// request (the claim's before the class's): where a problem of the
// defaulted config is reported.
func (s Check) lastConfig(claim *resourceapi.ResourceClaim, request, driver string, paths map[int]string) string {
	last := ""
	for i, c := range claim.Status.Allocation.Devices.Config {
		if c.Opaque != nil && c.Opaque.Driver == driver && claimspec.AppliesTo(c.Requests, request) {
			if last == "" || c.Source == resourceapi.AllocationConfigSourceClaim {
				last = paths[i]
			}
		}
	}
	return last
}

var configField = regexp.MustCompile(`^config\[(\d+)\]\[[A-Za-z]+\]\.parameters`)

// fieldIn is a field of Prepare's errors (config[i][source].parameters...,
// or relative to the config: interface.mtu) as a path in the object.
func (s Check) fieldIn(f string, paths map[int]string, at string) string {
	if m := configField.FindStringSubmatchIndex(f); m != nil {
		i, _ := strconv.Atoi(f[m[2]:m[3]]) // digits: the pattern's
		return paths[i] + f[m[1]:]
	}
	if at != "" && f != "" {
		return at + "." + f
	}
	if at != "" {
		return at
	}
	return f
}

// Class checks a DeviceClass's opaque configs of fastpath.dev and the CNI
// driver on their own.
func (s Check) Class(class *resourceapi.DeviceClass) []Problem {
	var problems []Problem
	for i, c := range class.Spec.Config {
		if c.Opaque == nil {
			continue
		}
		path := field.NewPath("spec", "config").Index(i).Child("opaque", "parameters")
		var errs field.ErrorList
		switch c.Opaque.Driver {
		case devices.DriverName:
			// Merged as Prepare merges it, the class's config alone: what
			// it asks of a shared device is judged by its own sharedParent.
			m := v1alpha1.Merge{ClassName: class.Name}
			if errs = m.AddClass(c.Opaque.Parameters.Raw, path); len(errs) > 0 {
				break
			}
			var cfg v1alpha1.InterfaceConfig
			if cfg, errs = m.Config(); len(errs) == 0 {
				cfg.Default("class")
				// A class may leave to its claims what a config needs
				// (mode vlan's VLAN ID).
				errs = slices.DeleteFunc(cfg.Validate(), func(e *field.Error) bool { return e.Type == field.ErrorTypeRequired })
				for _, e := range errs {
					e.Field = path.String() + "." + e.Field
				}
			}
		case claims.DriverCNI:
			var cfg v1alpha1.CNIConfig
			if cfg, errs = v1alpha1.DecodeCNIConfig(c.Opaque.Parameters.Raw, path); len(errs) == 0 {
				cc := cnipolicy.Sources{Approved: s.Approved, Static: true}
				_, errs = cnipolicy.Build(context.Background(), cfg, "class-"+class.Name, s.Policy, cc)
				for _, e := range errs {
					e.Field = path.String() + "." + e.Field
				}
			}
		}
		for _, e := range bounds.Keep(errs) {
			problems = append(problems, Problem{Err: e})
		}
	}
	return problems
}
