package migrate

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strconv"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/yaml"

	ncv1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/validate"
)

// DefaultResourcePrefix is the operator's prefix of resource names (its
// RESOURCE_PREFIX) unless it was installed with another.
const DefaultResourcePrefix = "openshift.io"

// Label marks every object migrate writes, so that they can be listed
// (and deleted) together.
const Label = "app.kubernetes.io/created-by"

// Input is the objects to convert, in any order.
type Input struct {
	Objects []Object
}

// InputOf is the objects of manifests as validate reads them (files,
// directories, standard input).
func InputOf(docs []*validate.Manifest) Input {
	var in Input
	for _, d := range docs {
		in.Objects = append(in.Objects, Object{Where: d.Where(), JSON: d.JSON()})
	}
	return in
}

// Options change the conversion.
type Options struct {
	// ResourcePrefix is the operator's RESOURCE_PREFIX: a policy's
	// resourceName foo is the resource PREFIX/foo. Default openshift.io.
	ResourcePrefix string
}

// Result is fastpath's objects and what did not carry over.
type Result struct {
	NodeConfigs                  []*ncv1.FastpathNodeConfig
	DeviceClasses                []*resourceapi.DeviceClass
	NetworkAttachmentDefinitions []*nadv1.NetworkAttachmentDefinition
	ResourceClaimTemplates       []*resourceapi.ResourceClaimTemplate
	Report                       []Item
}

// Objects are the result's objects in the order they are applied: the
// nodes' configuration first, then the classes, the networks and the
// claims that use them.
func (r Result) Objects() []any {
	var out []any
	for _, o := range r.NodeConfigs {
		out = append(out, o)
	}
	for _, o := range r.DeviceClasses {
		out = append(out, o)
	}
	for _, o := range r.NetworkAttachmentDefinitions {
		out = append(out, o)
	}
	for _, o := range r.ResourceClaimTemplates {
		out = append(out, o)
	}
	return out
}

// Item is one line of the report: a source object's field that has no
// equivalent, or was changed, and what to do.
type Item struct {
	Kind, Namespace, Name string
	// Field is the field's path in the object; "" for the whole object.
	Field   string
	Message string
}

func (i Item) String() string {
	var b strings.Builder
	b.WriteString(i.Kind + " ")
	if i.Namespace != "" {
		b.WriteString(i.Namespace + "/")
	}
	b.WriteString(i.Name + ": ")
	if i.Field != "" {
		b.WriteString(i.Field + ": ")
	}
	b.WriteString(i.Message)
	return b.String()
}

type ref struct{ Kind, Namespace, Name string }

func refOf(kind string, m metav1.ObjectMeta) ref { return ref{kind, m.Namespace, m.Name} }

func (r ref) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

type report struct{ items []Item }

func (r *report) add(at ref, field, msg string) {
	r.items = append(r.items, Item{Kind: at.Kind, Namespace: at.Namespace, Name: at.Name, Field: field, Message: msg})
}

// converter carries the conversion's state across the kinds.
type converter struct {
	opts   Options
	r      *report
	groups []*group
	// resources are the operator's resources by full name, in the order
	// of the policies (highest priority first).
	resources     []*resource
	resourceIndex map[string]*resource
}

// group is the sources of one FastpathNodeConfig: those with one node
// selector.
type group struct {
	key      string
	selector metav1.LabelSelector
	sources  []ref
	pfs      []*pf
	pfIndex  map[string]*pf
	policies []*nodePolicy
	// draFilters are the devices dra-driver-sriov's policies publish,
	// draNames the resource names their DeviceAttributes give.
	draFilters []string
	draNames   []ncv1.ResourceName
}

// pf is a PF one or more policies of a group name.
type pf struct {
	sel    ncv1.PFSelector
	claims []*pfClaim
}

// pfClaim is a policy's VFs of a PF: all of them (whole) or an index
// range; parts are what is left of it once the policies of higher
// priority have taken theirs.
type pfClaim struct {
	p           *nodePolicy
	whole       bool
	first, last int
	driver      string
	noVFs       bool   // switchdev, ib, externally managed: no vfs entry
	extra       string // a CEL condition besides the PF's
	parts       [][2]int
	untouched   bool // whole, and nothing taken from it
}

// resource is an operator resource: its class's mode follows its
// deviceType.
type resource struct {
	name   string
	driver string
	rdma   bool
	from   ref
}

// Convert converts the objects. It never fails: what cannot be carried
// over is in the report.
func Convert(in Input, opts Options) Result {
	if opts.ResourcePrefix == "" {
		opts.ResourcePrefix = DefaultResourcePrefix
	}
	r := &report{}
	src := decode(in.Objects, r)
	c := &converter{opts: opts, r: r, resourceIndex: map[string]*resource{}}
	for _, p := range src.policies {
		c.policy(p)
	}
	c.draPolicies(src.draPolicy, src.attributes)
	var res Result
	res.NodeConfigs = c.nodeConfigs()
	res.DeviceClasses = c.classes()
	res.NetworkAttachmentDefinitions, res.ResourceClaimTemplates = c.networks(src.networks, src.ibNetworks)
	c.pools(src.pools)
	res.Report = r.items
	return res
}

// group is the group of the selector, made on first use.
func (c *converter) group(sel metav1.LabelSelector, from ref) *group {
	if len(sel.MatchLabels) == 0 {
		sel.MatchLabels = nil
	}
	key, _ := json.Marshal(sel) // a selector always marshals; map keys sorted
	for _, g := range c.groups {
		if g.key == string(key) {
			if !slices.Contains(g.sources, from) {
				g.sources = append(g.sources, from)
			}
			return g
		}
	}
	g := &group{key: string(key), selector: sel, sources: []ref{from}, pfIndex: map[string]*pf{}}
	c.groups = append(c.groups, g)
	return g
}

func (g *group) pf(sel ncv1.PFSelector) *pf {
	key := sel.Name + "|" + sel.PCIAddress
	if p, ok := g.pfIndex[key]; ok {
		return p
	}
	p := &pf{sel: sel}
	g.pfIndex[key] = p
	g.pfs = append(g.pfs, p)
	return p
}

// pfName is an entry of nicSelector.pfNames: ens1f0, or ens1f0#2-7 for
// VFs 2 to 7.
var pfName = regexp.MustCompile(`^([^#]+)(?:#(\d+)-(\d+))?$`)

// policy takes a SriovNetworkNodePolicy into its group: a claim of each
// PF it names, and its resource.
func (c *converter) policy(p *nodePolicy) {
	at := refOf("SriovNetworkNodePolicy", p.ObjectMeta)
	s := p.Spec
	if s.ResourceName == "" {
		c.r.add(at, "spec.resourceName", "required: the policy is left out")
		return
	}
	name := c.opts.ResourcePrefix + "/" + s.ResourceName
	if err := v1alpha1.ValidResourceName(name); err != nil {
		c.r.add(at, "spec.resourceName", fmt.Sprintf("%q: %v: the policy is left out", name, err))
		return
	}
	// Enum values in any letter case, as the operator compares them.
	var driver string
	switch strings.ToLower(s.DeviceType) {
	case "", "netdevice":
	case "vfio-pci":
		driver = "vfio-pci"
	default:
		c.r.add(at, "spec.deviceType", fmt.Sprintf("%q: must be netdevice or vfio-pci: the policy is left out", s.DeviceType))
		return
	}
	var noVFs bool
	switch strings.ToLower(s.LinkType) {
	case "", "eth":
	case "ib":
		noVFs = true
		c.r.add(at, "spec.linkType", "ib: no equivalent: fastpath does not set a PF's link type; its PFs get no vfs entry (their VFs, made by another tool, keep the resource name)")
	default:
		c.r.add(at, "spec.linkType", fmt.Sprintf("%q: must be eth or ib: left out", s.LinkType))
	}
	switch strings.ToLower(s.ESwitchMode) {
	case "", "legacy":
	case "switchdev":
		noVFs = true
		c.r.add(at, "spec.eSwitchMode", "switchdev: no equivalent: fastpath keeps a PF's eswitch in legacy mode and makes no representors; its PFs get no vfs entry: leave them to the tool that offloads them")
	default:
		c.r.add(at, "spec.eSwitchMode", fmt.Sprintf("%q: must be legacy or switchdev: left out", s.ESwitchMode))
	}
	if s.ExternallyManaged {
		noVFs = true
		c.r.add(at, "spec.externallyManaged", "true: its PFs get no vfs entry (fastpath changes nothing of a PF it is not given); the VFs their own tool makes keep the resource name")
	}
	noEquivalent := []struct {
		field string
		set   bool
		why   string
	}{
		{"spec.vdpaType", s.VdpaType != "", "fastpath makes no vDPA devices"},
		{"spec.needVhostNet", s.NeedVhostNet, "fastpath mounts no /dev/vhost-net: give the pod the device with a volume of its own"},
		{"spec.bridge", len(s.Bridge) > 0, "fastpath manages no OVS bridge"},
		{"spec.eSwitchParams", len(s.ESwitchParams) > 0, "fastpath keeps a PF's eswitch in legacy mode"},
		{"spec.nicSelector.netFilter", s.NicSelector.NetFilter != "", "fastpath does not read the cloud's network IDs: name the PFs with pfNames or rootDevices"},
		{"spec.excludeTopology", s.ExcludeTopology, "fastpath publishes every VF's NUMA node (resource.kubernetes.io/numaNode); a claim is aligned with another device only when it asks (a constraint matchAttribute), so there is nothing to exclude"},
	}
	for _, n := range noEquivalent {
		if n.set {
			c.r.add(at, n.field, "no equivalent: "+n.why)
		}
	}
	ns := s.NicSelector
	if len(ns.PFNames) == 0 && len(ns.RootDevices) == 0 {
		if ns.Vendor != "" || ns.DeviceID != "" || ns.NetFilter != "" {
			// A VF carries its own device ID, not its PF's: a filter on
			// vendor and device cannot tell the policy's VFs from others.
			c.r.add(at, "spec.nicSelector", "selects PFs by vendor and deviceID only, which fastpath cannot express safely (a VF publishes its own device ID, not its PF's): nothing is written for this policy; name the PFs with pfNames or rootDevices")
		} else {
			c.r.add(at, "spec.nicSelector", "selects no NIC (an empty nicSelector selects none, as the operator's): nothing is written for this policy")
		}
		return
	}
	if ns.Vendor != "" || ns.DeviceID != "" {
		c.r.add(at, "spec.nicSelector", "vendor and deviceID are redundant with pfNames or rootDevices: the PFs are named, and the VFs selected by their PF")
	}
	var extra string
	if len(ns.PFNames) > 0 && len(ns.RootDevices) > 0 {
		// The operator selects a PF that both lists name.
		addrs := make([]string, len(ns.RootDevices))
		for i, a := range ns.RootDevices {
			addrs[i] = strings.ToLower(a)
		}
		extra = attr("pfPciAddress") + " in " + celList(addrs)
		c.r.add(at, "spec.nicSelector.rootDevices", "given with pfNames: the vfs entries name the PFs by pfNames, and the resource's filter asks for both")
	}
	c.resource(name, driver, s.IsRdma, at)
	g := c.group(metav1.LabelSelector{MatchLabels: s.NodeSelector}, at)
	g.policies = append(g.policies, p)
	claim := func(sel ncv1.PFSelector) *pfClaim {
		cl := &pfClaim{p: p, whole: true, driver: driver, noVFs: noVFs, extra: extra}
		f := g.pf(sel)
		f.claims = append(f.claims, cl)
		return cl
	}
	for i, e := range ns.PFNames {
		m := pfName.FindStringSubmatch(strings.TrimSpace(e))
		if m == nil {
			c.r.add(at, fmt.Sprintf("spec.nicSelector.pfNames[%d]", i), fmt.Sprintf("%q: not a PF name or NAME#FIRST-LAST: left out", e))
			continue
		}
		if m[2] == "" {
			claim(ncv1.PFSelector{Name: m[1]})
			continue
		}
		first, _ := strconv.Atoi(m[2])
		last, _ := strconv.Atoi(m[3])
		if first > last {
			c.r.add(at, fmt.Sprintf("spec.nicSelector.pfNames[%d]", i), fmt.Sprintf("%q: the range's first VF is after its last: left out", e))
			continue
		}
		cl := claim(ncv1.PFSelector{Name: m[1]})
		cl.whole, cl.first, cl.last = false, first, last
	}
	if len(ns.PFNames) == 0 {
		for _, a := range ns.RootDevices {
			claim(ncv1.PFSelector{PCIAddress: strings.ToLower(a)})
		}
	}
}

// resource records an operator resource; its policies must agree on what
// it is.
func (c *converter) resource(name, driver string, rdma bool, at ref) {
	if r, ok := c.resourceIndex[name]; ok {
		if r.driver != driver {
			c.r.add(at, "spec.deviceType", fmt.Sprintf("resource %s is %s in %s, which has priority: its DeviceClass is of that mode; give this policy another resourceName", name, deviceType(r.driver), r.from))
		}
		r.rdma = r.rdma || rdma && driver == ""
		return
	}
	r := &resource{name: name, driver: driver, rdma: rdma && driver == "", from: at}
	c.resourceIndex[name] = r
	c.resources = append(c.resources, r)
	switch {
	case rdma && driver == "":
		c.r.add(at, "spec.isRdma", fmt.Sprintf("true: the class of %s is mode delegate (sriov-cni moves the VF, as with the device plugin), and fastpath gives a VF's RDMA device only in mode netdev (rdma: {}): a pod that needs it claims the VF with class rdma.fastpath.dev, or a class of yours of mode netdev with rdma: {}, and selects no NetworkAttachmentDefinition for it", name))
	case rdma:
		c.r.add(at, "spec.isRdma", "true with deviceType vfio-pci: a VF bound to vfio-pci has no RDMA device to give: left out")
	}
}

func deviceType(driver string) string {
	if driver == "" {
		return "netdevice"
	}
	return driver
}

// attr is a fastpath.dev attribute in CEL.
func attr(name string) string { return `device.attributes["fastpath.dev"].` + name }

func celList(vals []string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = strconv.Quote(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// isVF guards the resource names' filters: only a VF has pfName and vfID,
// and && does not read them on another device.
var isVF = attr("kind") + ` == "sriov-vf"`

// nodeConfigs makes a FastpathNodeConfig of each group.
func (c *converter) nodeConfigs() []*ncv1.FastpathNodeConfig {
	var out []*ncv1.FastpathNodeConfig
	for _, g := range c.groups {
		nc := &ncv1.FastpathNodeConfig{
			TypeMeta:   metav1.TypeMeta{APIVersion: ncv1.Group + "/" + ncv1.Version, Kind: ncv1.Kind},
			ObjectMeta: metav1.ObjectMeta{Name: groupName(g), Labels: createdBy()},
			Spec:       ncv1.FastpathNodeConfigSpec{NodeSelector: g.selector},
		}
		for _, f := range g.pfs {
			if v, ok := c.vfs(f); ok {
				nc.Spec.VFs = append(nc.Spec.VFs, v)
			}
		}
		nc.Spec.ResourceNames = c.resourceNames(g)
		nc.Spec.ResourceNames = append(nc.Spec.ResourceNames, g.draNames...)
		if len(g.draFilters) > 0 {
			// dra-driver-sriov publishes only what its policies select; the
			// operator's VFs of the same nodes are published too.
			published := slices.Clone(g.draFilters)
			for _, rn := range nc.Spec.ResourceNames[:len(nc.Spec.ResourceNames)-len(g.draNames)] {
				published = append(published, rn.Filter)
			}
			nc.Spec.Filter = new(orOf(published))
		}
		out = append(out, nc)
	}
	c.overlaps(out)
	return out
}

// vfs is the vfs entry of a PF: the most VFs its policies ask, the MTU of
// the one of highest priority, each VF's driver by the policy that has
// it. It computes each claim's parts.
func (c *converter) vfs(f *pf) (ncv1.VFs, bool) {
	numVFs := 0
	for _, cl := range f.claims {
		numVFs = max(numVFs, cl.p.Spec.NumVFs)
	}
	v := ncv1.VFs{PF: f.sel, NumVFs: numVFs}
	var taken [][2]int
	owner := map[[2]int]*nodePolicy{}
	noVFs := false
	for _, cl := range f.claims {
		at := refOf("SriovNetworkNodePolicy", cl.p.ObjectMeta)
		if n := cl.p.Spec.NumVFs; n != numVFs {
			c.r.add(at, "spec.numVfs", fmt.Sprintf("%d: PF %s gets %d VFs, the most its policies ask", n, f.sel, numVFs))
		}
		want := [2]int{cl.first, cl.last}
		if cl.whole {
			want = [2]int{0, numVFs - 1}
		}
		if want[1] >= numVFs {
			c.r.add(at, "spec.nicSelector.pfNames", fmt.Sprintf("PF %s: VFs %d-%d: the PF has %d VFs (numVfs): only those up to %d are this policy's", f.sel, want[0], want[1], numVFs, numVFs-1))
			want[1] = numVFs - 1
		}
		cl.parts = subtract(want, taken)
		cl.untouched = cl.whole && len(cl.parts) == 1 && cl.parts[0] == want
		for _, t := range taken {
			if t[0] <= want[1] && want[0] <= t[1] {
				o := owner[t]
				c.r.add(at, "spec.nicSelector.pfNames", fmt.Sprintf("PF %s: VFs %d-%d are also %s's (priority %d, applied first): they are left out of this policy", f.sel, max(t[0], want[0]), min(t[1], want[1]), refOf("SriovNetworkNodePolicy", o.ObjectMeta), o.Spec.Priority))
			}
		}
		for _, p := range cl.parts {
			taken = append(taken, p)
			owner[p] = cl.p
		}
		noVFs = noVFs || cl.noVFs
	}
	var mtuFrom *nodePolicy
	for _, cl := range f.claims {
		mtu := cl.p.Spec.MTU
		switch {
		case mtu == 0:
		case mtuFrom == nil:
			v.MTU, mtuFrom = mtu, cl.p
		case mtu != v.MTU:
			c.r.add(refOf("SriovNetworkNodePolicy", cl.p.ObjectMeta), "spec.mtu", fmt.Sprintf("%d: PF %s takes MTU %d of %s, which has priority", mtu, f.sel, v.MTU, refOf("SriovNetworkNodePolicy", mtuFrom.ObjectMeta)))
		}
	}
	if noVFs {
		return v, false
	}
	if len(f.claims) == 1 && f.claims[0].untouched {
		v.Driver = f.claims[0].driver
		return v, true
	}
	for _, cl := range f.claims {
		for _, p := range cl.parts {
			if cl.driver != "" {
				v.Ranges = append(v.Ranges, ncv1.VFRange{First: p[0], Last: p[1], Driver: cl.driver})
			}
		}
	}
	slices.SortFunc(v.Ranges, func(a, b ncv1.VFRange) int { return a.First - b.First })
	return v, true
}

// subtract is what of r the intervals taken leave, in order.
func subtract(r [2]int, taken [][2]int) [][2]int {
	if r[0] > r[1] {
		return nil
	}
	left := [][2]int{r}
	for _, t := range taken {
		var next [][2]int
		for _, l := range left {
			if t[1] < l[0] || t[0] > l[1] {
				next = append(next, l)
				continue
			}
			if l[0] < t[0] {
				next = append(next, [2]int{l[0], t[0] - 1})
			}
			if t[1] < l[1] {
				next = append(next, [2]int{t[1] + 1, l[1]})
			}
		}
		left = next
	}
	slices.SortFunc(left, func(a, b [2]int) int { return a[0] - b[0] })
	return left
}

// resourceNames are a group's entries of its policies, those of index
// ranges first: a node names a device after the first entry that admits
// it.
func (c *converter) resourceNames(g *group) []ncv1.ResourceName {
	var ranged, whole []ncv1.ResourceName
	for _, p := range g.policies {
		var clauses []string
		isRanged := false
		for _, f := range g.pfs {
			for _, cl := range f.claims {
				if cl.p != p {
					continue
				}
				pfCond := attr("pfName") + " == " + strconv.Quote(f.sel.Name)
				if f.sel.Name == "" {
					pfCond = attr("pfPciAddress") + " == " + strconv.Quote(f.sel.PCIAddress)
				}
				if cl.extra != "" {
					pfCond += " && " + cl.extra
				}
				if cl.untouched || cl.noVFs && cl.whole {
					clauses = append(clauses, pfCond)
					continue
				}
				parts := cl.parts
				if cl.noVFs && !cl.whole {
					// No vfs entry: the range is as the policy says.
					parts = [][2]int{{cl.first, cl.last}}
				}
				for _, r := range parts {
					isRanged = true
					clauses = append(clauses, fmt.Sprintf("%s && %s >= %d && %s <= %d", pfCond, attr("vfID"), r[0], attr("vfID"), r[1]))
				}
			}
		}
		if len(clauses) == 0 {
			c.r.add(refOf("SriovNetworkNodePolicy", p.ObjectMeta), "spec.nicSelector", "no VF is left to this policy: its resource name is given to none")
			continue
		}
		rn := ncv1.ResourceName{Name: c.opts.ResourcePrefix + "/" + p.Spec.ResourceName, Filter: isVF + " && " + paren(orOf(clauses))}
		if isRanged {
			ranged = append(ranged, rn)
		} else {
			whole = append(whole, rn)
		}
	}
	return append(ranged, whole...)
}

func orOf(clauses []string) string {
	if len(clauses) == 1 {
		return clauses[0]
	}
	ps := make([]string, len(clauses))
	for i, cl := range clauses {
		ps[i] = paren(cl)
	}
	return strings.Join(ps, " || ")
}

func paren(s string) string {
	if strings.Contains(s, "||") || strings.Contains(s, "&&") {
		return "(" + s + ")"
	}
	return s
}

// groupName is the FastpathNodeConfig's name: sriov- and its sources'
// names, or, when that is long, the first's and a hash of the selector.
func groupName(g *group) string {
	names := make([]string, len(g.sources))
	for i, s := range g.sources {
		names[i] = dnsLabel(s.Name)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	name := "sriov-" + strings.Join(names, "-")
	if len(name) > 63 {
		h := fnv.New32a()
		h.Write([]byte(g.key))
		name = fmt.Sprintf("sriov-%.40s-%08x", names[0], h.Sum32())
	}
	return strings.ReplaceAll(name, "--", "-")
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// dnsLabel is s in lowercase letters, digits and '-'.
func dnsLabel(s string) string {
	return strings.Trim(notDNS.ReplaceAllString(strings.ToLower(s), "-"), "-")
}

// overlaps reports pairs of FastpathNodeConfigs that may select one node:
// such a node applies neither.
func (c *converter) overlaps(ncs []*ncv1.FastpathNodeConfig) {
	// ncs are the groups', in order.
	for i, a := range ncs {
		for j := i + 1; j < len(ncs); j++ {
			b := ncs[j]
			if disjoint(a.Spec.NodeSelector, b.Spec.NodeSelector) {
				continue
			}
			c.r.add(ref{Kind: ncv1.Kind, Name: a.Name}, "spec.nodeSelector", fmt.Sprintf("may select a node that FastpathNodeConfig %s selects too (sources: %s; %s), and a node selected by two applies neither: merge them into one, or make their node selectors exclusive", b.Name, refList(c.groups[i].sources), refList(c.groups[j].sources)))
		}
	}
}

func refList(refs []ref) string {
	s := make([]string, len(refs))
	for i, r := range refs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

// disjoint says whether no node can be selected by both: some label of
// one's requirements contradicts the other's. Anything else may overlap.
func disjoint(a, b metav1.LabelSelector) bool {
	sa, errA := metav1.LabelSelectorAsSelector(&a)
	sb, errB := metav1.LabelSelectorAsSelector(&b)
	if errA != nil || errB != nil {
		return false
	}
	ra, _ := sa.Requirements()
	rb, _ := sb.Requirements()
	for _, x := range ra {
		for _, y := range rb {
			if x.Key() == y.Key() && (contradicts(x, y) || contradicts(y, x)) {
				return true
			}
		}
	}
	return false
}

// contradicts says whether no value of the key meets both x and y.
func contradicts(x, y labels.Requirement) bool {
	in := func(r labels.Requirement) bool {
		switch r.Operator() {
		case selection.In, selection.Equals, selection.DoubleEquals:
			return true
		}
		return false
	}
	switch {
	case in(x) && in(y):
		return sets.New(x.ValuesUnsorted()...).Intersection(sets.New(y.ValuesUnsorted()...)).Len() == 0
	case in(x) && (y.Operator() == selection.NotIn || y.Operator() == selection.NotEquals):
		return sets.New(y.ValuesUnsorted()...).IsSuperset(sets.New(x.ValuesUnsorted()...))
	case (in(x) || x.Operator() == selection.Exists) && y.Operator() == selection.DoesNotExist:
		return true
	}
	return false
}

// YAML is the objects as a multi-document YAML stream, each without the
// fields the API server fills (creationTimestamp, an empty status).
func YAML(objs []any) ([]byte, error) {
	var b strings.Builder
	for i, o := range objs {
		data, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("object %d: %w", i, err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("object %d: %w", i, err)
		}
		if meta, ok := m["metadata"].(map[string]any); ok && meta["creationTimestamp"] == nil {
			delete(meta, "creationTimestamp")
		}
		if st, ok := m["status"].(map[string]any); ok && len(st) == 0 {
			delete(m, "status")
		}
		y, err := yaml.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("object %d: %w", i, err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return []byte(b.String()), nil
}
