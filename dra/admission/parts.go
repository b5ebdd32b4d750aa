package admission

import (
	"encoding/json"
	"fmt"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
	ncv1 "github.com/fastpath-dra/fastpath/dra/api/nodeconfig/v1alpha1"
	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// The parts of an object the webhook judges, and their bounds.
//
// validate is given an object as fastpath reads it: its apiVersion and
// kind, its name and namespace, the annotations fastpath reads and its
// spec; of a pod, whose claims the webhook does not look up, hostNetwork
// alone. The rest (other metadata, status, a pod's containers) is never
// decoded, so that its size costs a pass over its bytes and no more; a
// pod is not refused for it.
//
// Before anything is decoded, the judged parts are held to what the
// largest object of their kind can have: a claim's and a class's requests
// and configs to the API server's bounds, a config, an annotation and a
// network's configuration to package bounds', fastpath's kinds to their
// CRDs'; and every list and object in them to at most bounds.Items items,
// nested at most twice bounds.Depth deep, which none of them needs more
// than. An object over one of them is refused unread, the part, the bound
// and the size named.

// judgedAnnotations are the annotations fastpath reads: a pod's network
// selections and a NetworkAttachmentDefinition's device resource.
var judgedAnnotations = []string{nadv1.NetworkAttachmentAnnot, pnv1.AnnotationNetworks, npwg.ResourceNameAnnot}

// nestingBound is how deep the judged parts may nest: a config, nested at
// most bounds.Depth deep, sits a few levels down in its object.
const nestingBound = 2 * bounds.Depth

// groupKind is a kind validate judges, by the group of its apiVersion.
type groupKind struct{ group, kind string }

// A bound is the most one part of an object may have.
type bound struct {
	// path is the part's: members by name ("spec.devices"), "[*]" for
	// every item of a list, "[key]" for a map's key.
	path string
	// items bounds a list's items (an object's members); bytes, the
	// part's size (a string's once decoded, another value's as written).
	items, bytes int
	// what names the part in an error about its bytes.
	what string
}

// partBounds are the bounds of the judged parts of each kind validate
// judges, beyond bounds.Items and nestingBound.
var partBounds = map[groupKind][]bound{
	{"resource.k8s.io", "ResourceClaim"}:         claimBounds("spec"),
	{"resource.k8s.io", "ResourceClaimTemplate"}: claimBounds("spec.spec"),
	{"resource.k8s.io", "DeviceClass"}: {
		{path: "spec.config", items: resourceapi.DeviceConfigMaxSize},
		{path: "spec.config[*].opaque.parameters", bytes: bounds.ConfigBytes, what: "a class's config"},
	},
	{v1alpha1.CNIGroup, v1alpha1.KindCNIConfig}: {
		{path: "spec", bytes: bounds.NetworkConfigBytes, what: "a CNIConfig's spec"},
		{path: "spec.plugins", items: bounds.Plugins},
		{path: "spec.plugins[*].arguments", items: bounds.Arguments},
	},
	{"", "Pod"}: annotationBounds(nadv1.NetworkAttachmentAnnot, pnv1.AnnotationNetworks),
	{"k8s.cni.cncf.io", "NetworkAttachmentDefinition"}: append(annotationBounds(npwg.ResourceNameAnnot),
		bound{path: "spec.config", bytes: bounds.NetworkConfigBytes, what: "a NetworkAttachmentDefinition's config"}),
	// The CRDs' maxItems.
	{pnv1.Group, pnv1.KindPodNetwork}:           {{path: "spec.parametersRefs", items: 16}},
	{pnv1.Group, pnv1.KindPodNetworkAttachment}: {{path: "spec.parametersRefs", items: 16}},
	{ncv1.Group, ncv1.Kind}: {
		{path: "spec.nodeSelector.matchLabels", items: 32},
		{path: "spec.nodeSelector.matchExpressions", items: 32},
		{path: "spec.resourceNames", items: 32},
		{path: "spec.ipPools", items: 64},
		{path: "spec.vfs", items: 64},
	},
}

// claimBounds are the bounds of a claim's spec at spec: the API server's.
func claimBounds(spec string) []bound {
	devices := spec + ".devices"
	return []bound{
		{path: devices + ".requests", items: resourceapi.DeviceRequestsMaxSize},
		{path: devices + ".requests[*].firstAvailable", items: resourceapi.FirstAvailableDeviceRequestMaxSize},
		{path: devices + ".config", items: resourceapi.DeviceConfigMaxSize},
		{path: devices + ".config[*].requests", items: resourceapi.DeviceRequestsMaxSize},
		{path: devices + ".config[*].opaque.parameters", bytes: bounds.ConfigBytes, what: "a claim's config"},
	}
}

// annotationBounds bound the annotations fastpath reads of a kind.
func annotationBounds(keys ...string) []bound {
	var out []bound
	for _, k := range keys {
		out = append(out, bound{path: "metadata.annotations[" + k + "]", bytes: bounds.AnnotationBytes, what: "an annotation fastpath reads"})
	}
	return out
}

// objectMeta is what names an object, read as validate reads it.
type objectMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name, Namespace string
	} `json:"metadata"`
}

// groupKindOf is the group and kind of an object as validate reads them.
func (m objectMeta) groupKind() groupKind {
	group, version, _ := strings.Cut(m.APIVersion, "/")
	if version == "" {
		group = ""
	}
	return groupKind{group, m.Kind}
}

// judged is an object as the webhook judges it.
type judged struct {
	// js is what validate is given: the judged parts alone for a kind
	// validate judges; the object as it came for anything else (another
	// kind, not JSON), of which validate reads no more than its kind.
	js []byte
	// name says which object it is, for the messages: its kind,
	// namespace and name.
	name string
	// over are the parts over their bounds: the object is refused
	// unread.
	over field.ErrorList
	// parts says whether js is the judged parts.
	parts bool
}

// judgedParts are the judged parts of an object, or the parts of it over
// their bounds. namespace is the request's, for an object that names
// none.
func judgedParts(js []byte, namespace string) judged {
	var meta objectMeta
	if !json.Valid(js) || !isObject(js) || json.Unmarshal(js, &meta) != nil {
		return judged{js: js}
	}
	if meta.Metadata.Namespace == "" {
		meta.Metadata.Namespace = namespace
	}
	j := judged{js: js, name: objectName(meta.Kind, meta.Metadata.Namespace, meta.Metadata.Name)}
	gk := meta.groupKind()
	kindBounds, ok := partBounds[gk]
	if !ok {
		return j
	}
	pod := gk == groupKind{"", "Pod"}
	parts := project(js, pod)
	if err := scanParts(parts); err != nil {
		j.over = append(j.over, err)
	}
	for _, b := range kindBounds {
		b.check(parts, b.steps(), nil, &j.over)
	}
	if len(j.over) == 0 {
		j.js, j.parts = parts, true
	}
	return j
}

// objectName is how the messages name an object.
func objectName(kind, namespace, name string) string {
	if name == "" {
		name = "(no name yet)"
	}
	if namespace == "" {
		return kind + " " + name
	}
	return kind + " " + namespace + "/" + name
}

// project is an object's judged parts, as JSON: its members apiVersion,
// kind, metadata (name, namespace and judgedAnnotations) and spec (of a
// pod, hostNetwork), as they were written, each as often as it was
// (validate says when a member is written twice). It measures them first,
// so that they are written into one allocation of their size.
func project(js []byte, pod bool) []byte {
	measure := projection{measure: true}
	measure.run(js, pod)
	w := projection{out: make([]byte, 0, measure.n)}
	w.run(js, pod)
	return w.out
}

// projection writes the judged parts of an object, or, measuring,
// counts their bytes.
type projection struct {
	out     []byte
	measure bool
	n       int
	// first says, for each object open, whether no member is written
	// to it yet.
	first []bool
}

func (p *projection) run(js []byte, pod bool) {
	p.open()
	for key, value := range members(js) {
		switch {
		case fieldIs(key, "apiVersion"), fieldIs(key, "kind"):
			p.member(key, value)
		case fieldIs(key, "metadata"):
			p.object(key, value, func(key, value []byte) {
				switch {
				case fieldIs(key, "name"), fieldIs(key, "namespace"):
					p.member(key, value)
				case fieldIs(key, "annotations"):
					p.object(key, value, func(key, value []byte) {
						for _, a := range judgedAnnotations {
							if keyIs(key, a) {
								p.member(key, value)
							}
						}
					})
				}
			})
		case fieldIs(key, "spec") && pod:
			p.object(key, value, func(key, value []byte) {
				if fieldIs(key, "hostNetwork") {
					p.member(key, value)
				}
			})
		case fieldIs(key, "spec"):
			p.member(key, value)
		}
	}
	p.close()
}

func (p *projection) write(b ...byte) {
	p.n += len(b)
	if !p.measure {
		p.out = append(p.out, b...)
	}
}

func (p *projection) open() {
	p.write('{')
	p.first = append(p.first, true)
}

func (p *projection) close() {
	p.write('}')
	p.first = p.first[:len(p.first)-1]
}

// sep writes the comma before every member but an object's first.
func (p *projection) sep() {
	if top := len(p.first) - 1; !p.first[top] {
		p.write(',')
	} else {
		p.first[top] = false
	}
}

// member writes a member as it was written.
func (p *projection) member(key, value []byte) {
	p.sep()
	p.write(key...)
	p.write(':')
	p.write(value...)
}

// object writes a member whose value is the members of value that keep
// writes; a value that is not an object, as it was written.
func (p *projection) object(key, value []byte, keep func(key, value []byte)) {
	if !isObject(value) {
		p.member(key, value)
		return
	}
	p.sep()
	p.write(key...)
	p.write(':')
	p.open()
	for k, v := range members(value) {
		keep(k, v)
	}
	p.close()
}

// A step is one step of a bound's path: a member (a struct's field, as
// the decoders match it, or a map's key, exactly), or every item of a
// list.
type step struct {
	name     string
	key, all bool
}

// steps are the steps of the bound's path.
func (b bound) steps() []step {
	var out []step
	for p := b.path; p != ""; {
		switch {
		case strings.HasPrefix(p, "[*]"):
			out, p = append(out, step{all: true}), p[len("[*]"):]
		case p[0] == '[':
			end := strings.IndexByte(p, ']')
			out, p = append(out, step{name: p[1:end], key: true}), p[end+1:]
		default:
			p = strings.TrimPrefix(p, ".")
			end := strings.IndexAny(p, ".[")
			if end < 0 {
				end = len(p)
			}
			out, p = append(out, step{name: p[:end]}), p[end:]
		}
	}
	return out
}

// check adds to over the parts at the rest of the bound's path below
// value (at path at) that are over it. A list of more than bounds.Items
// is not looked into: scanParts refuses it.
func (b bound) check(value []byte, rest []step, at *field.Path, over *field.ErrorList) {
	if len(rest) == 0 {
		if b.items > 0 {
			if n := count(value); n > b.items {
				*over = append(*over, field.TooMany(at, n, b.items))
			}
		}
		if b.bytes > 0 {
			if n := size(value); n > b.bytes {
				*over = append(*over, &field.Error{Type: field.ErrorTypeTooLong, Field: at.String(), BadValue: field.OmitValueType{},
					Detail: fmt.Sprintf("is %d bytes, more than the %d %s may have", n, b.bytes, b.what)})
			}
		}
		return
	}
	s := rest[0]
	if s.all {
		if count(value) > bounds.Items {
			return
		}
		i := 0
		for item := range items(value) {
			b.check(item, rest[1:], at.Index(i), over)
			i++
		}
		return
	}
	for key, v := range members(value) {
		switch {
		case s.key && keyIs(key, s.name):
			b.check(v, rest[1:], at.Key(s.name), over)
		case !s.key && fieldIs(key, s.name):
			b.check(v, rest[1:], child(at, keyString(key)), over)
		}
	}
}

// child is path's child name; the root's is name.
func child(path *field.Path, name string) *field.Path {
	if path == nil {
		return field.NewPath(name)
	}
	return path.Child(name)
}

// scanParts checks, in one pass over the judged parts, that no list or
// object in them has more than bounds.Items items, nor nests deeper than
// nestingBound. The error is the first bound broken, at the path of the
// list or object that breaks it: its items counted to its end.
func scanParts(js []byte) *field.Error {
	var open [nestingBound]frame
	depth := 0
	for i := 0; i < len(js); i++ {
		switch js[i] {
		case '"':
			end := stringEnd(js, i)
			if f := &open[max(depth-1, 0)]; depth > 0 && f.wantKey {
				f.key, f.wantKey = js[i:end], false
			}
			i = end - 1
		case '{', '[':
			if depth == nestingBound {
				return &field.Error{Type: field.ErrorTypeTooMany, Field: pathOf(open[:depth]).String(), BadValue: depth + 1,
					Detail: fmt.Sprintf("must have at most %d levels of nested objects and lists", nestingBound)}
			}
			object := js[i] == '{'
			open[depth] = frame{object: object, wantKey: object}
			depth++
		case '}', ']':
			if depth == 0 {
				continue
			}
			if f := open[depth-1]; f.commas >= bounds.Items {
				return field.TooMany(pathOf(open[:depth-1]), f.commas+1, bounds.Items)
			}
			depth--
		case ',':
			if f := &open[max(depth-1, 0)]; depth > 0 {
				f.commas++
				f.wantKey = f.object
			}
		}
	}
	return nil
}

// A frame is a list or an object scanParts is in: the commas at its own
// level so far, an object's last key (as written) and whether its next
// string is a key.
type frame struct {
	object, wantKey bool
	commas          int
	key             []byte
}

// pathOf is the path of what the innermost of frames holds at the point
// the scan is at: below each object, its last key; in each list, the
// item after its commas. The root's is nil.
func pathOf(frames []frame) *field.Path {
	var p *field.Path
	for _, f := range frames {
		switch {
		case f.object:
			p = child(p, keyString(f.key))
		case p == nil:
			p = field.NewPath("").Index(f.commas)
		default:
			p = p.Index(f.commas)
		}
	}
	return p
}
