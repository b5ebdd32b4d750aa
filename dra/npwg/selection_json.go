package npwg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"

	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The keys of an element of the JSON format (§4.1.2.1).
var elementKeys = []string{"name", "namespace", "ips", "mac", "interface", "cni-args", "portMappings",
	"bandwidth", "default-route", "infiniband-guid", "ipam-claim-reference"}

// parseJSONList reads the JSON list format (§4.1.2).
func parseJSONList(podNamespace, value string, path *field.Path) ([]Attachment, field.ErrorList) {
	if value[0] != '[' {
		return nil, field.ErrorList{field.Invalid(path, shorten(value),
			fmt.Sprintf(`must be a JSON list of objects, like [{"name": "net-a"}], not %s`, kindOf([]byte(value))))}
	}
	var elems []json.RawMessage
	if err := json.Unmarshal([]byte(value), &elems); err != nil {
		return nil, field.ErrorList{field.Invalid(path, shorten(value), "not valid JSON: "+jsonError(err))}
	}
	var atts []Attachment
	var errs field.ErrorList
	for i, raw := range elems {
		a, e := parseElement(podNamespace, raw, i, path.Index(i))
		errs = append(errs, e...)
		atts = append(atts, a)
	}
	return atts, errs
}

// parseElement reads one object of the JSON list. Every key is checked for
// its type and value; keys with a period are other implementations' and
// are kept; other unknown keys are errors, since the standard reserves
// them.
func parseElement(podNamespace string, raw json.RawMessage, index int, p *field.Path) (Attachment, field.ErrorList) {
	a := Attachment{Index: index}
	members, dups, ok := objectMembers(raw)
	if !ok {
		return a, field.ErrorList{field.TypeInvalid(p, shorten(string(raw)),
			fmt.Sprintf(`must be an object with at least a name, like {"name": "net-a"}, not %s`, kindOf(raw)))}
	}
	var errs field.ErrorList
	for _, key := range dups {
		e := field.Duplicate(p.Child(key), key)
		e.Detail = "the key appears more than once in the element"
		errs = append(errs, e)
	}
	have := map[string]bool{}
	for _, m := range members {
		have[m.key] = true
		kp := p.Child(m.key)
		var e field.ErrorList
		switch m.key {
		case "name":
			a.Name, e = stringValue(kp, m.value, func(s string) field.ErrorList { return validName(kp, s) })
		case "namespace":
			// An empty namespace is the pod's (§4.1.2.1.1).
			a.Namespace, e = stringValue(kp, m.value, func(s string) field.ErrorList {
				if s == "" {
					return nil
				}
				return validNamespace(kp, s)
			})
		case "interface":
			a.InterfaceRequest, e = stringValue(kp, m.value, func(s string) field.ErrorList { return validInterface(kp, s, "") })
		case "ips":
			a.IPRequest, e = parseIPs(kp, m.value)
		case "mac":
			a.MacRequest, e = canonicalValue(kp, m.value, parseMAC)
		case "infiniband-guid":
			a.InfinibandGUIDRequest, e = canonicalValue(kp, m.value, parseGUID)
		case "cni-args":
			a.CNIArgs, e = parseCNIArgs(kp, m.value)
		case "portMappings":
			a.PortMappingsRequest, e = parsePortMappings(kp, m.value)
		case "bandwidth":
			a.BandwidthRequest, e = parseBandwidth(kp, m.value)
		case "default-route":
			a.GatewayRequest, e = parseDefaultRoute(kp, m.value)
		case "ipam-claim-reference":
			a.IPAMClaimReference, e = stringValue(kp, m.value, func(s string) field.ErrorList {
				return subdomainName(kp, s, "the name of an IPAMClaim of the pod's namespace")
			})
		default:
			if strings.Contains(m.key, ".") {
				if a.Extensions == nil {
					a.Extensions = map[string]json.RawMessage{}
				}
				a.Extensions[m.key] = m.value
				continue
			}
			detail := "unknown key: the standard reserves keys without a period; other implementations' keys are in reverse domain notation, like org.example.key"
			if i := slices.IndexFunc(elementKeys, func(k string) bool { return strings.EqualFold(k, m.key) }); i >= 0 {
				detail = fmt.Sprintf("unknown key; keys are case-sensitive: did you mean %q?", elementKeys[i])
			}
			e = field.ErrorList{field.Forbidden(kp, detail)}
		}
		errs = append(errs, e...)
	}
	if !have["name"] {
		errs = append(errs, field.Required(p.Child("name"), "the name of a NetworkAttachmentDefinition"))
	}
	if a.Namespace == "" {
		a.Namespace = podNamespace
	}
	if have["ips"] && have["ipam-claim-reference"] {
		errs = append(errs, field.Forbidden(p.Child("ipam-claim-reference"), "an element asks for static ips or names an IPAMClaim to take them from, not both"))
	}
	return a, errs
}

func parseIPs(p *field.Path, raw json.RawMessage) ([]string, field.ErrorList) {
	ips, errs := stringList(p, raw)
	if len(errs) > 0 {
		return nil, errs
	}
	if len(ips) == 0 {
		return nil, field.ErrorList{field.Invalid(p, "[]", "must list at least one address; leave the key out to have the network choose")}
	}
	seen := map[string]int{}
	at := indexer(p)
	for i, s := range ips {
		addr, err := parseIPRequest(s)
		if err != nil {
			errs = append(errs, &field.Error{Type: field.ErrorTypeInvalid, Field: at(i), BadValue: s, Detail: err.Error()})
			continue
		}
		if j, dup := seen[addr.String()]; dup {
			e := field.Duplicate(p.Index(i), s)
			e.Detail = fmt.Sprintf("the same address as ips[%d]", j)
			errs = append(errs, e)
			continue
		}
		seen[addr.String()] = i
	}
	return ips, errs
}

// indexer names the items of the list at p, its path written once for
// them all: a list may have a problem an item.
func indexer(p *field.Path) func(i int) string {
	base := p.String()
	return func(i int) string { return base + "[" + strconv.Itoa(i) + "]" }
}

func parseDefaultRoute(p *field.Path, raw json.RawMessage) ([]net.IP, field.ErrorList) {
	gws, errs := stringList(p, raw)
	if len(errs) > 0 {
		return nil, errs
	}
	at := indexer(p)
	for i, s := range gws {
		if _, err := parseIP(s); err != nil {
			errs = append(errs, &field.Error{Type: field.ErrorTypeInvalid, Field: at(i), BadValue: s, Detail: "a gateway " + err.Error()})
		}
	}
	// An empty list still selects the attachment for the default route.
	return gatewayIPs(gws), errs
}

func parseCNIArgs(p *field.Path, raw json.RawMessage) (*map[string]any, field.ErrorList) {
	if kindOf(raw) != kindObject {
		return nil, field.ErrorList{typeError(p, raw, "an object of arguments for the plugins")}
	}
	args := map[string]any{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // large integers keep their digits
	if err := dec.Decode(&args); err != nil {
		return nil, field.ErrorList{field.Invalid(p, shorten(string(raw)), err.Error())}
	}
	return &args, nil
}

var protocols = []string{"TCP", "UDP", "SCTP"}

func parsePortMappings(p *field.Path, raw json.RawMessage) ([]*nadv1.PortMapEntry, field.ErrorList) {
	if kindOf(raw) != kindList {
		return nil, field.ErrorList{typeError(p, raw, "a list of port mappings")}
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, field.ErrorList{field.Invalid(p, shorten(string(raw)), err.Error())}
	}
	if len(elems) == 0 {
		return nil, field.ErrorList{field.Invalid(p, "[]", "must list at least one port mapping; leave the key out for none")}
	}
	var errs field.ErrorList
	var pms []*nadv1.PortMapEntry
	for i, raw := range elems {
		ep := p.Index(i)
		members, dups, ok := objectMembers(raw)
		if !ok {
			errs = append(errs, typeError(ep, raw, `an object, like {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}`))
			continue
		}
		errs = append(errs, duplicateKeys(ep, dups)...)
		pm := &nadv1.PortMapEntry{}
		have := map[string]bool{}
		for _, m := range members {
			have[m.key] = true
			kp := ep.Child(m.key)
			switch m.key {
			case "hostPort", "containerPort":
				n, err := intValue(kp, m.value, 1, math.MaxUint16)
				if err != nil {
					errs = append(errs, err)
				}
				if m.key == "hostPort" {
					pm.HostPort = int(n)
				} else {
					pm.ContainerPort = int(n)
				}
			case "protocol":
				var e field.ErrorList
				pm.Protocol, e = stringValue(kp, m.value, func(s string) field.ErrorList {
					if !slices.Contains(protocols, strings.ToUpper(s)) {
						return field.ErrorList{field.NotSupported(kp, s, protocols)}
					}
					return nil
				})
				errs = append(errs, e...)
			case "hostIP":
				// Not in the standard's list, but in CNI's conventions and
				// the standard's Go type.
				var e field.ErrorList
				pm.HostIP, e = stringValue(kp, m.value, func(s string) field.ErrorList {
					if _, err := parseIP(s); err != nil {
						return field.ErrorList{field.Invalid(kp, s, err.Error())}
					}
					return nil
				})
				errs = append(errs, e...)
			default:
				errs = append(errs, field.Forbidden(kp, "unknown key: a port mapping has hostPort, containerPort, and optionally protocol and hostIP"))
			}
		}
		for _, k := range []string{"hostPort", "containerPort"} {
			if !have[k] {
				errs = append(errs, field.Required(ep.Child(k), "a port number from 1 to 65535"))
			}
		}
		pms = append(pms, pm)
	}
	return pms, errs
}

func parseBandwidth(p *field.Path, raw json.RawMessage) (*nadv1.BandwidthEntry, field.ErrorList) {
	members, dups, ok := objectMembers(raw)
	if !ok {
		return nil, field.ErrorList{typeError(p, raw, `an object, like {"ingressRate": 2048, "egressRate": 8000}`)}
	}
	errs := duplicateKeys(p, dups)
	if len(members) == 0 {
		return nil, append(errs, field.Invalid(p, "{}", "must have at least one of ingressRate, ingressBurst, egressRate and egressBurst; leave the key out for no limit"))
	}
	bw := &nadv1.BandwidthEntry{}
	have := map[string]bool{}
	for _, m := range members {
		have[m.key] = true
		kp := p.Child(m.key)
		var dst *int
		switch m.key {
		case "ingressRate":
			dst = &bw.IngressRate
		case "ingressBurst":
			dst = &bw.IngressBurst
		case "egressRate":
			dst = &bw.EgressRate
		case "egressBurst":
			dst = &bw.EgressBurst
		default:
			errs = append(errs, field.Forbidden(kp, "unknown key: bandwidth has ingressRate, ingressBurst, egressRate and egressBurst"))
			continue
		}
		n, err := intValue(kp, m.value, 1, math.MaxInt)
		if err != nil {
			errs = append(errs, err)
		}
		*dst = int(n)
	}
	for _, dir := range []string{"ingress", "egress"} {
		if have[dir+"Burst"] && !have[dir+"Rate"] {
			errs = append(errs, field.Required(p.Child(dir+"Rate"), dir+"Burst limits nothing without "+dir+"Rate"))
		}
	}
	return bw, errs
}

// member is one key of a JSON object and its value.
type member struct {
	key   string
	value json.RawMessage
}

// objectMembers reads the members of a JSON object in their order; keys
// that appear again are returned apart. ok is false when raw is not an
// object.
func objectMembers(raw []byte) (members []member, dups []string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, false
		}
		if seen[key] {
			dups = append(dups, key)
			continue
		}
		seen[key] = true
		members = append(members, member{key, v})
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, nil, false
	}
	return members, dups, true
}

func duplicateKeys(p *field.Path, keys []string) field.ErrorList {
	var errs field.ErrorList
	for _, k := range keys {
		e := field.Duplicate(p.Child(k), k)
		e.Detail = "the key appears more than once"
		errs = append(errs, e)
	}
	return errs
}

const (
	kindObject = "an object"
	kindList   = "a list"
	kindString = "a string"
	kindNumber = "a number"
)

// kindOf names the kind of a JSON value, for error messages.
func kindOf(raw []byte) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return "nothing"
	}
	switch t[0] {
	case '{':
		return kindObject
	case '[':
		return kindList
	case '"':
		return kindString
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	}
	return kindNumber
}

func typeError(p *field.Path, raw json.RawMessage, want string) *field.Error {
	return field.TypeInvalid(p, shorten(string(raw)), fmt.Sprintf("must be %s, not %s", want, kindOf(raw)))
}

// stringValue reads a JSON string and checks it with check.
func stringValue(p *field.Path, raw json.RawMessage, check func(string) field.ErrorList) (string, field.ErrorList) {
	if kindOf(raw) != kindString {
		return "", field.ErrorList{typeError(p, raw, kindString)}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", field.ErrorList{field.Invalid(p, shorten(string(raw)), err.Error())}
	}
	return s, check(s)
}

// canonicalValue reads a JSON string with parse, which returns its
// canonical form.
func canonicalValue(p *field.Path, raw json.RawMessage, parse func(string) (string, error)) (string, field.ErrorList) {
	var canonical string
	s, errs := stringValue(p, raw, func(s string) field.ErrorList {
		var err error
		if canonical, err = parse(s); err != nil {
			return field.ErrorList{field.Invalid(p, s, err.Error())}
		}
		return nil
	})
	if len(errs) > 0 {
		return s, errs
	}
	return canonical, nil
}

// stringList reads a JSON list of strings, in one decoding when they are
// all strings.
func stringList(p *field.Path, raw json.RawMessage) ([]string, field.ErrorList) {
	if kindOf(raw) != kindList {
		return nil, field.ErrorList{typeError(p, raw, "a list of strings")}
	}
	var values []any
	if err := json.Unmarshal(raw, &values); err != nil {
		return nil, field.ErrorList{field.Invalid(p, shorten(string(raw)), err.Error())}
	}
	list := make([]string, len(values))
	var elems []json.RawMessage // as written, for the errors of those that are not strings
	var errs field.ErrorList
	for i, v := range values {
		if s, ok := v.(string); ok {
			list[i] = s
			continue
		}
		if elems == nil {
			if err := json.Unmarshal(raw, &elems); err != nil {
				return nil, field.ErrorList{field.Invalid(p, shorten(string(raw)), err.Error())}
			}
		}
		errs = append(errs, typeError(p.Index(i), elems[i], kindString))
	}
	return list, errs
}

// intValue reads a JSON integer between lo and hi.
func intValue(p *field.Path, raw json.RawMessage, lo, hi int64) (int64, *field.Error) {
	if kindOf(raw) != kindNumber {
		return 0, typeError(p, raw, "an integer")
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return 0, field.Invalid(p, shorten(string(raw)), err.Error())
	}
	i, err := n.Int64()
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange):
		return 0, field.Invalid(p, n.String(), fmt.Sprintf("must be between %d and %d", lo, hi))
	case err != nil:
		return 0, field.TypeInvalid(p, n.String(), "must be an integer, written without a fraction or an exponent")
	case i < lo || i > hi:
		return 0, field.Invalid(p, i, fmt.Sprintf("must be between %d and %d", lo, hi))
	}
	return i, nil
}

// jsonError says where JSON that does not parse goes wrong.
func jsonError(err error) string {
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return fmt.Sprintf("%v (at byte %d)", syntax, syntax.Offset)
	}
	return err.Error()
}

// shorten keeps a value quoted in an error short.
func shorten(s string) string {
	const maxQuoted = 80
	if len(s) <= maxQuoted {
		return s
	}
	return strings.ToValidUTF8(s[:maxQuoted], "") + "..."
}
