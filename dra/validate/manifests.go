package validate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	resourcev1beta1 "k8s.io/api/resource/v1beta1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/devices"
	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	ncv1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/cnipolicy"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// Manifest is one document of an input.
type Manifest struct {
	file string
	line int // of the document's first line
	js   []byte
	meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name, Namespace string
		} `json:"metadata"`
	}
}

func (m *Manifest) Where() string { return fmt.Sprintf("%s:%d", m.file, m.line) }

// JSON is the object as JSON.
func (m *Manifest) JSON() []byte { return m.js }

func (m *Manifest) Object() string {
	name := m.meta.Metadata.Name
	if m.meta.Metadata.Namespace != "" {
		name = m.meta.Metadata.Namespace + "/" + name
	}
	return m.meta.Kind + " " + name
}

// namespace is the object's, "default" when it names none.
func (m *Manifest) Namespace() string {
	if m.meta.Metadata.Namespace == "" {
		return "default"
	}
	return m.meta.Metadata.Namespace
}

// Finding is one line of output: a problem of a document.
type Finding struct {
	Doc *Manifest
	Problem
}

// Skip is an object validate does not judge, or judges only in part.
type Skip struct {
	Doc *Manifest
	Why string
}

// ByPlace orders documents by file and line.
func ByPlace(a, b *Manifest) int {
	if c := strings.Compare(a.file, b.file); c != 0 {
		return c
	}
	return a.line - b.line
}

func (s Skip) String() string {
	return fmt.Sprintf("skipped: %s (%s): %s", s.Doc.Object(), s.Doc.Where(), s.Why)
}

func (p Finding) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", p.Doc.Where(), p.Doc.Object())
	if p.Request != "" {
		fmt.Fprintf(&b, ": request %q", p.Request)
	}
	if n, ok := bounds.Counted(p.Err); ok {
		// The problems of a config past bounds.Problems, counted.
		fmt.Fprintf(&b, ": and %d more problems, not each said", n)
		return b.String()
	}
	fmt.Fprintf(&b, ": %s", p.Err.Error())
	return b.String()
}

// Count is how many problems the finding stands for: one, or as many as
// validate counted in it and did not keep (bounds.Keep).
func (p Finding) Count() int {
	if n, ok := bounds.Counted(p.Err); ok {
		return n
	}
	return 1
}

var docSeparator = regexp.MustCompile(`^---(\s.*)?$`)

// ReadManifests reads every document of the inputs; what cannot be read
// (a missing file, YAML that does not parse) is an error of its own.
func ReadManifests(inputs []string, stdin io.Reader) ([]*Manifest, []error) {
	var docs []*Manifest
	var errs []error
	for _, in := range inputs {
		var files []string
		switch info, err := os.Stat(in); {
		case in == "-":
			files = []string{"-"}
		case err != nil:
			errs = append(errs, err)
			continue
		case info.IsDir():
			err := filepath.WalkDir(in, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				switch filepath.Ext(path) {
				case ".yaml", ".yml", ".json":
					if !d.IsDir() {
						files = append(files, path)
					}
				}
				return nil
			})
			if err != nil {
				errs = append(errs, err)
				continue
			}
		default:
			files = []string{in}
		}
		for _, f := range files {
			var data []byte
			var err error
			if f == "-" {
				data, err = io.ReadAll(stdin)
				f = "<stdin>"
			} else {
				data, err = os.ReadFile(f)
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			d, err := SplitManifests(f, data)
			docs = append(docs, d...)
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return docs, errs
}

// SplitManifests splits a file into its documents (a List's items are
// documents of their own).
func SplitManifests(file string, data []byte) ([]*Manifest, error) {
	var docs []*Manifest
	var errs []error
	flush := func(start int, lines []string) {
		doc := []byte(strings.Join(lines, "\n"))
		// The document's line: its first that is not a comment.
		for _, l := range lines {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
				break
			}
			start++
		}
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: not YAML: %w", file, start, err))
			return
		}
		objects, err := objectsOf(file, start, js)
		docs = append(docs, objects...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	// Lines up to 16 MiB; the buffer grows to the longest line.
	sc.Buffer(nil, 16<<20)
	start, n := 1, 0
	var lines []string
	for sc.Scan() {
		n++
		if docSeparator.MatchString(sc.Text()) {
			flush(start, lines)
			lines, start = nil, n+1
			continue
		}
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return docs, fmt.Errorf("%s: %w", file, err)
	}
	flush(start, lines)
	return docs, errors.Join(errs...)
}

// objectsOf are the objects of one document, as JSON: none for an empty
// document, the items of a List, or the document itself.
func objectsOf(file string, line int, js []byte) ([]*Manifest, error) {
	if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	items, err := listItems(js)
	if err != nil {
		return nil, fmt.Errorf("%s:%d: %w", file, line, err)
	}
	var docs []*Manifest
	var errs []error
	for _, item := range items {
		m := &Manifest{file: file, line: line, js: item}
		if err := json.Unmarshal(item, &m.meta); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: not a Kubernetes object: %w", file, line, err))
			continue
		}
		docs = append(docs, m)
	}
	return docs, errors.Join(errs...)
}

// listItems are the items of a List, or the object itself.
func listItems(js []byte) ([]json.RawMessage, error) {
	var list struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(js, &list); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	if list.Kind == "List" || strings.HasSuffix(list.Kind, "List") && list.Items != nil {
		return list.Items, nil
	}
	return []json.RawMessage{js}, nil
}

// decoded is a Manifest decoded into what it is.
type decoded struct {
	doc      *Manifest
	claim    *resourceapi.ResourceClaimSpec
	template bool
	class    *resourceapi.DeviceClass
	approved *v1alpha1.CNIConfigObject
	pod      *corev1.Pod
	nad      *nadv1.NetworkAttachmentDefinition
	network  *pnv1.PodNetwork
	attach   *pnv1.PodNetworkAttachment
	nodeCfg  *ncv1.FastpathNodeConfig
	v1beta1  bool
}

// CheckManifests checks the documents: the DeviceClasses and CNIConfigs
// among them first, as the claims' classes and approved configs;
// NetworkAttachmentDefinitions as the node judges their configuration
// (nads). It says which objects it does not judge.
func CheckManifests(docs []*Manifest, check Check, nads npwg.ConfigRules) ([]Finding, []Skip) {
	var problems []Finding
	var skipped []Skip
	report := func(d *Manifest, request string, errs field.ErrorList) {
		for _, e := range errs {
			if e.Field == "<nil>" {
				e.Field = ""
			}
			problems = append(problems, Finding{Doc: d, Problem: Problem{Request: request, Err: e}})
		}
	}
	var all []decoded
	// The chart's classes, unless the check knows the cluster's or the
	// inputs have their own: a class's config (the chart's with the
	// operator's values) decides what its claims may do.
	classes := maps.Clone(chartClasses())
	maps.Copy(classes, check.Classes)
	check.Classes = classes
	check.Approved = cnipolicy.ApprovedSet{}
	for _, d := range docs {
		dec, errs := decode(d)
		report(d, "", errs)
		if dec == nil {
			if len(errs) == 0 {
				skipped = append(skipped, Skip{Doc: d, Why: whyNotJudged})
			}
			continue
		}
		all = append(all, *dec)
		switch {
		case dec.class != nil:
			check.Classes[dec.class.Name] = dec.class
		case dec.approved != nil:
			check.Approved[dec.approved.Name] = dec.approved
		}
	}
	// The interfaces each claim (by namespace/name) and template gives its
	// pod, and whether it has devices of fastpath's drivers.
	type claimInfo struct {
		ifaces []Interface
		ours   bool
	}
	claims, templates := map[string]claimInfo{}, map[string]claimInfo{}
	for _, dec := range all {
		d := dec.doc
		switch {
		case dec.class != nil:
			for _, p := range check.Class(dec.class) {
				report(d, p.Request, field.ErrorList{p.Err})
			}
		case dec.approved != nil:
			report(d, "", cnipolicy.ConfigProblems(dec.approved, check.Policy))
		case dec.nad != nil:
			errs, why := nadProblems(dec.nad, nads)
			report(d, "", errs)
			if why != "" {
				skipped = append(skipped, Skip{Doc: d, Why: why})
			}
		case dec.network != nil:
			report(d, "", pnv1.ValidatePodNetwork(dec.network))
		case dec.attach != nil:
			report(d, "", pnv1.ValidatePodNetworkAttachment(dec.attach))
		case dec.nodeCfg != nil:
			errs := dec.nodeCfg.Spec.Validate(field.NewPath("spec"))
			// The CEL expressions, as the node compiles them.
			for _, e := range dec.nodeCfg.Spec.Filters() {
				if check.CompileFilter == nil {
					break
				}
				if err := check.CompileFilter(e.Expr); err != nil {
					errs = append(errs, field.Invalid(e.Path, e.Expr, err.Error()))
				}
			}
			report(d, "", errs)
		case dec.claim != nil:
			path := field.NewPath("spec")
			if dec.template {
				path = path.Child("spec")
			}
			name := d.meta.Metadata.Name
			if dec.template {
				name += "-template"
			}
			ps, ifaces := check.Claim(d.Namespace(), name, *dec.claim, path)
			for _, p := range ps {
				if dec.v1beta1 {
					p.Err.Field = strings.Replace(p.Err.Field, ".exactly", "", 1)
				}
				report(d, p.Request, field.ErrorList{p.Err})
			}
			info := claimInfo{ifaces: ifaces, ours: ours(check, *dec.claim)}
			key := d.Namespace() + "/" + d.meta.Metadata.Name
			if dec.template {
				templates[key] = info
			} else {
				claims[key] = info
			}
		}
	}
	// The PodNetwork of each PodNetworkAttachment among the inputs, by
	// namespace/name.
	attachments := map[string]string{}
	for _, dec := range all {
		if dec.attach != nil {
			attachments[dec.doc.Namespace()+"/"+dec.attach.Name] = dec.attach.Spec.PodNetworkName
		}
	}
	// Pods: a claim of fastpath's drivers serves one pod, and interface
	// names are unique in a pod across its claims.
	usedBy := map[string]string{}
	for _, dec := range all {
		if dec.pod == nil {
			continue
		}
		d, pod := dec.doc, dec.pod
		type user struct{ from, request string }
		seen := map[string]user{}
		for i, rc := range pod.Spec.ResourceClaims {
			path := field.NewPath("spec", "resourceClaims").Index(i)
			var info claimInfo
			var known bool
			var from string
			switch {
			case rc.ResourceClaimName != nil:
				key := d.Namespace() + "/" + *rc.ResourceClaimName
				info, known = claims[key]
				from = "claim " + *rc.ResourceClaimName
				if known && info.ours {
					if other, used := usedBy[key]; used {
						report(d, "", field.ErrorList{field.Invalid(path.Child("resourceClaimName"), *rc.ResourceClaimName,
							fmt.Sprintf("pod %s uses this claim too: a claim of fastpath.dev or the CNI driver serves exactly one pod; use a ResourceClaimTemplate", other))})
					}
					usedBy[key] = d.meta.Metadata.Name
				}
			case rc.ResourceClaimTemplateName != nil:
				info, known = templates[d.Namespace()+"/"+*rc.ResourceClaimTemplateName]
				from = "template " + *rc.ResourceClaimTemplateName
			}
			if !known {
				continue
			}
			for _, iface := range info.ifaces {
				// Within a claim, names are checked with the claim.
				if other, dup := seen[iface.Name]; dup && other.from != from {
					report(d, "", field.ErrorList{field.Duplicate(path, fmt.Sprintf("interface %s of %s, request %q (also of %s, request %q)",
						iface.Name, from, iface.Request, other.from, other.request))})
					continue
				}
				seen[iface.Name] = user{from, iface.Request}
			}
		}
		taken := map[string]bool{"eth0": true} // the primary network's
		for name := range seen {
			taken[name] = true
		}
		report(d, "", networkProblems(d.Namespace(), pod, taken))
		report(d, "", podNetworkProblems(d.Namespace(), pod, taken, attachments))
		report(d, "", limitProblems(d.Namespace(), pod, len(seen)))
	}
	return problems, skipped
}

// nadProblems judges a NetworkAttachmentDefinition's CNI configuration
// with the node's rules (npwg.ConfigRules, as fastpathd run --npwg does
// when a pod selects it), short of what needs the pod (its element's
// capabilities, a delegated device). One with an empty spec.config is
// judged only for its namespace when the rules have no directory: its
// configuration is a file of the node's; why then says so.
func nadProblems(nad *nadv1.NetworkAttachmentDefinition, rules npwg.ConfigRules) (errs field.ErrorList, why string) {
	if npwg.OnDisk(nad) && rules.ConfDir.Path == "" {
		if err := rules.ConfDir.Allows(nad); err != nil {
			return nadConfigProblem(nad, err), ""
		}
		return nil, "spec.config is empty: its configuration is the file of its name in the node's --npwg-conf-dir, which validate was not given"
	}
	if _, err := rules.Config(nad); err != nil {
		return nadConfigProblem(nad, err), ""
	}
	return nil, ""
}

// nadConfigProblem is the node's refusal of a NetworkAttachmentDefinition's
// configuration as a problem of spec.config. The problem's line names the
// object: the error's own naming of it is left out.
func nadConfigProblem(nad *nadv1.NetworkAttachmentDefinition, err error) field.ErrorList {
	path := field.NewPath("spec", "config")
	if ce, ok := errors.AsType[*npwg.ConfigError](err); ok {
		detail := ce.Err.Error()
		if ce.Source != "" && ce.Source != npwg.SourceSpec {
			detail = "empty, and the configuration of its name, " + ce.Source + ": " + detail
		}
		return field.ErrorList{field.Forbidden(path, detail)}
	}
	// npwg.LoadConfig's errors: the object, then where the configuration
	// is from.
	detail := strings.TrimPrefix(err.Error(), "NetworkAttachmentDefinition "+nad.Namespace+"/"+nad.Name+": ")
	detail = strings.TrimPrefix(detail, npwg.SourceSpec+": ")
	return field.ErrorList{field.Invalid(path, field.OmitValueType{}, detail)}
}

// podNetworkProblems checks a pod's PodNetwork list (KEP-3698's static
// validation, network.fastpath.dev/networks): each PodNetwork once, one
// default gateway, valid and unique interface names, none with
// hostNetwork; and no interface name the pod has already (taken) but the
// default PodNetwork's own.
func podNetworkProblems(namespace string, pod *corev1.Pod, taken map[string]bool, attachments map[string]string) field.ErrorList {
	if _, ok := pod.Annotations[pnv1.AnnotationNetworks]; !ok {
		return nil
	}
	nets, errs := pnv1.PodNetworks(pod.Annotations, pod.Spec.HostNetwork)
	if len(errs) > 0 {
		return errs
	}
	path := field.NewPath("metadata", "annotations").Key(pnv1.AnnotationNetworks)
	// A pod references a PodNetwork once, also through the attachments
	// among the inputs (the KEP's active validation, where the inputs
	// tell).
	byNetwork := map[string]int{}
	for i, n := range nets {
		if n.PodNetworkName == pnv1.DefaultPodNetworkName && n.InterfaceName != "" && n.InterfaceName != "eth0" {
			errs = append(errs, field.Invalid(path.Index(i).Child("interfaceName"), n.InterfaceName,
				"the default PodNetwork is the runtime's network, on the pod's eth0: it cannot be moved (leave interfaceName out, or give eth0)"))
		}
		if n.InterfaceName != "" && taken[n.InterfaceName] && n.PodNetworkName != pnv1.DefaultPodNetworkName {
			errs = append(errs, field.Duplicate(path.Index(i).Child("interfaceName"), n.InterfaceName+" (the pod has it already: its primary network's, or a claim's)"))
		}
		network, via := n.PodNetworkName, ""
		if n.PodNetworkAttachmentName != "" {
			var known bool
			if network, known = attachments[namespace+"/"+n.PodNetworkAttachmentName]; !known {
				continue
			}
			via = " through PodNetworkAttachment " + n.PodNetworkAttachmentName
		}
		if first, dup := byNetwork[network]; dup {
			errs = append(errs, field.Duplicate(path.Index(i), fmt.Sprintf("PodNetwork %s%s (element %d attaches it too: a pod references a PodNetwork once)", network, via, first)))
			continue
		}
		byNetwork[network] = i
	}
	return errs
}

// networkProblems checks a pod's network selection annotation: each
// malformed element or key is a problem of its own, and so is an
// interface name the pod has already (taken: its primary network's, its
// claims').
func networkProblems(namespace string, pod *corev1.Pod, taken map[string]bool) field.ErrorList {
	value, ok := pod.Annotations[nadv1.NetworkAttachmentAnnot]
	if !ok {
		return nil
	}
	atts, errs := npwg.ParseNetworks(namespace, value)
	if len(errs) > 0 {
		return errs
	}
	return npwg.CheckInterfaces(atts, taken)
}

// ours says whether a claim has a request of fastpath.dev or the CNI
// driver.
func ours(check Check, spec resourceapi.ResourceClaimSpec) bool {
	for _, r := range spec.Devices.Requests {
		classes := []string{}
		if r.Exactly != nil {
			classes = append(classes, r.Exactly.DeviceClassName)
		}
		for _, s := range r.FirstAvailable {
			classes = append(classes, s.DeviceClassName)
		}
		if slices.ContainsFunc(classes, func(c string) bool { return check.DriverOf(c) != "" }) {
			return true
		}
	}
	return false
}

// decode decodes a document of a kind validate checks, strictly (unknown
// and duplicate fields are problems); nil for other kinds.
func decode(d *Manifest) (*decoded, field.ErrorList) {
	group, version, _ := strings.Cut(d.meta.APIVersion, "/")
	if version == "" {
		group, version = "", group
	}
	strict := func(v any) field.ErrorList { return v1alpha1.DecodeStrict(d.js, v, nil) }
	switch {
	case d.meta.Kind == "" || d.meta.APIVersion == "":
		return nil, field.ErrorList{field.Required(field.NewPath("kind"), "not a Kubernetes object: apiVersion and kind are required")}
	case group == "resource.k8s.io" && (d.meta.Kind == "ResourceClaim" || d.meta.Kind == "ResourceClaimTemplate" || d.meta.Kind == "DeviceClass"):
		return decodeResource(d, version, strict)
	case group == v1alpha1.CNIGroup && d.meta.Kind == v1alpha1.KindCNIConfig:
		o, errs := v1alpha1.DecodeCNIConfigObject(d.js, nil)
		if len(errs) > 0 {
			return nil, errs
		}
		return &decoded{doc: d, approved: &o}, nil
	case group == "" && version == "v1" && d.meta.Kind == "Pod":
		var pod corev1.Pod
		errs := strict(&pod)
		return &decoded{doc: d, pod: &pod}, errs
	case group == nadGroup && d.meta.Kind == nadKind:
		if version != "v1" {
			return nil, field.ErrorList{field.NotSupported(field.NewPath("apiVersion"), d.meta.APIVersion, []string{nadGroup + "/v1"})}
		}
		var nad nadv1.NetworkAttachmentDefinition
		errs := strict(&nad)
		// The node judges it in its namespace.
		nad.Namespace = d.Namespace()
		return &decoded{doc: d, nad: &nad}, errs
	case group == pnv1.Group && (d.meta.Kind == pnv1.KindPodNetwork || d.meta.Kind == pnv1.KindPodNetworkAttachment):
		return decodePodNetwork(d, version, strict)
	case group == "" && (d.meta.Kind == pnv1.KindPodNetwork || d.meta.Kind == pnv1.KindPodNetworkAttachment):
		// KEP-3698 writes its objects as "apiVersion: v1", a group no
		// release of Kubernetes serves them in: fastpath serves them in
		// its own.
		return nil, field.ErrorList{field.Invalid(field.NewPath("apiVersion"), d.meta.APIVersion,
			fmt.Sprintf("KEP-3698's %s is not in Kubernetes' core group (v1) in any release; fastpath serves it as %s: set apiVersion: %s",
				d.meta.Kind, pnv1.SchemeGroupVersion.String(), pnv1.SchemeGroupVersion.String()))}
	case group == ncv1.Group && d.meta.Kind == ncv1.Kind:
		if version != ncv1.Version {
			return nil, field.ErrorList{field.NotSupported(field.NewPath("apiVersion"), d.meta.APIVersion, []string{ncv1.Group + "/" + ncv1.Version})}
		}
		var o ncv1.FastpathNodeConfig
		errs := strict(&o)
		return &decoded{doc: d, nodeCfg: &o}, errs
	}
	return nil, nil
}

// The NetworkAttachmentDefinition's group and kind.
const (
	nadGroup = "k8s.cni.cncf.io"
	nadKind  = "NetworkAttachmentDefinition"
)

// decodePodNetwork decodes a PodNetwork or a PodNetworkAttachment, its
// status aside: the controller writes it, and the KEP's examples carry
// fields a condition does not have (lastProbeTime).
func decodePodNetwork(d *Manifest, version string, strict func(any) field.ErrorList) (*decoded, field.ErrorList) {
	if version != pnv1.Version {
		return nil, field.ErrorList{field.NotSupported(field.NewPath("apiVersion"), d.meta.APIVersion, []string{pnv1.SchemeGroupVersion.String()})}
	}
	type object[S any] struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty"`
		Spec              S               `json:"spec"`
		Status            json.RawMessage `json:"status,omitempty"`
	}
	if d.meta.Kind == pnv1.KindPodNetwork {
		var o object[pnv1.PodNetworkSpec]
		errs := strict(&o)
		return &decoded{doc: d, network: &pnv1.PodNetwork{TypeMeta: o.TypeMeta, ObjectMeta: o.ObjectMeta, Spec: o.Spec}}, errs
	}
	var o object[pnv1.PodNetworkAttachmentSpec]
	errs := strict(&o)
	// Its refs without a namespace are of its namespace.
	o.Namespace = d.Namespace()
	return &decoded{doc: d, attach: &pnv1.PodNetworkAttachment{TypeMeta: o.TypeMeta, ObjectMeta: o.ObjectMeta, Spec: o.Spec}}, errs
}

func decodeResource(d *Manifest, version string, strict func(any) field.ErrorList) (*decoded, field.ErrorList) {
	var errs field.ErrorList
	// v1beta2 has v1's shape; v1beta1 has a request's fields where v1 has
	// them under exactly.
	var js []byte
	switch version {
	case "v1":
		js = d.js
	case "v1beta2":
		var obj any
		switch d.meta.Kind {
		case "ResourceClaim":
			obj = &resourcev1beta2.ResourceClaim{}
		case "ResourceClaimTemplate":
			obj = &resourcev1beta2.ResourceClaimTemplate{}
		default:
			obj = &resourcev1beta2.DeviceClass{}
		}
		errs = strict(obj)
		js, _ = json.Marshal(obj)
	case "v1beta1":
		var obj any
		switch d.meta.Kind {
		case "ResourceClaim":
			obj = &resourcev1beta1.ResourceClaim{}
		case "ResourceClaimTemplate":
			obj = &resourcev1beta1.ResourceClaimTemplate{}
		default:
			obj = &resourcev1beta1.DeviceClass{}
		}
		errs = strict(obj)
		data, _ := json.Marshal(obj)
		var err error
		if js, err = v1beta1ToV1(data, d.meta.Kind); err != nil {
			return nil, append(errs, field.Invalid(nil, "", err.Error()))
		}
	default:
		return nil, field.ErrorList{field.NotSupported(field.NewPath("apiVersion"), d.meta.APIVersion,
			[]string{"resource.k8s.io/v1", "resource.k8s.io/v1beta2", "resource.k8s.io/v1beta1"})}
	}
	dec := &decoded{doc: d, v1beta1: version == "v1beta1"}
	into := func(v any) {
		if version == "v1" {
			errs = append(errs, strict(v)...)
			return
		}
		if err := json.Unmarshal(js, v); err != nil {
			errs = append(errs, field.Invalid(nil, "", err.Error()))
		}
	}
	switch d.meta.Kind {
	case "ResourceClaim":
		var c resourceapi.ResourceClaim
		into(&c)
		dec.claim = &c.Spec
	case "ResourceClaimTemplate":
		var t resourceapi.ResourceClaimTemplate
		into(&t)
		dec.claim, dec.template = &t.Spec.Spec, true
	default:
		var c resourceapi.DeviceClass
		into(&c)
		dec.class = &c
	}
	return dec, errs
}

// v1beta1ToV1 moves the fields of each v1beta1 request that v1 has under
// exactly there.
func v1beta1ToV1(data []byte, kind string) ([]byte, error) {
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, err
	}
	spec, _ := obj["spec"].(map[string]any)
	if kind == "ResourceClaimTemplate" {
		spec, _ = spec["spec"].(map[string]any)
	}
	if devs, ok := spec["devices"].(map[string]any); ok && kind != "DeviceClass" {
		reqs, _ := devs["requests"].([]any)
		for i, r := range reqs {
			req, _ := r.(map[string]any)
			if _, alt := req["firstAvailable"]; alt || req == nil {
				continue
			}
			exactly := map[string]any{}
			for k, v := range req {
				if k != "name" {
					exactly[k] = v
					delete(req, k)
				}
			}
			req["exactly"] = exactly
			reqs[i] = req
		}
	}
	return json.Marshal(obj)
}

// limitProblems checks a pod's selected networks, and those and its
// claims' interfaces (claimIfaces) together, against the default limits,
// as a node with the default flags does at the pod's sandbox creation.
// Annotations that do not parse are left to the checks that say why.
func limitProblems(namespace string, pod *corev1.Pod, claimIfaces int) field.ErrorList {
	var selected, podNetworks int
	if value := pod.Annotations[nadv1.NetworkAttachmentAnnot]; strings.TrimSpace(value) != "" {
		atts, errs := npwg.ParseNetworks(namespace, value)
		if len(errs) > 0 {
			return nil
		}
		selected = len(atts)
	}
	if _, ok := pod.Annotations[pnv1.AnnotationNetworks]; ok {
		nets, errs := pnv1.PodNetworks(pod.Annotations, pod.Spec.HostNetwork)
		if len(errs) > 0 {
			return nil
		}
		for _, n := range nets {
			if n.PodNetworkName != pnv1.DefaultPodNetworkName {
				podNetworks++
			}
		}
	}
	return npwg.Limits{}.Check(selected, podNetworks, claimIfaces)
}

// Translations say, for each config of fastpath.dev in a claim or a
// claim template that is written in another driver's form (dranet's,
// dra-driver-sriov's), what it is in fastpath's own: one line each.
func Translations(docs []*Manifest) []string {
	var out []string
	for _, m := range docs {
		var obj struct {
			Spec struct {
				Devices resourceapi.DeviceClaim `json:"devices"`
				Spec    struct {
					Devices resourceapi.DeviceClaim `json:"devices"`
				} `json:"spec"`
			} `json:"spec"`
		}
		var path *field.Path
		switch m.meta.Kind {
		case "ResourceClaim":
			path = field.NewPath("spec", "devices", "config")
		case "ResourceClaimTemplate":
			path = field.NewPath("spec", "spec", "devices", "config")
		default:
			continue
		}
		if json.Unmarshal(m.js, &obj) != nil {
			continue
		}
		configs := obj.Spec.Devices.Config
		if m.meta.Kind == "ResourceClaimTemplate" {
			configs = obj.Spec.Spec.Devices.Config
		}
		for i, c := range configs {
			if c.Opaque == nil || c.Opaque.Driver != devices.DriverName {
				continue
			}
			p := path.Index(i).Child("opaque", "parameters")
			native, form, errs := v1alpha1.Native(c.Opaque.Parameters.Raw, p)
			if len(errs) > 0 || form == v1alpha1.FormNative {
				continue
			}
			out = append(out, fmt.Sprintf("%s: %s: %s is in %s's form; in fastpath's: %s", m.Where(), m.Object(), p, form, native))
		}
	}
	return out
}
