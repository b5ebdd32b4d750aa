package cnipolicy

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Kind is what a Ref takes from or changes on the host.
type Kind int

const (
	// HostDevice is a device of the host: an interface to take or attach
	// to, a PCI function, a MAC of the host's.
	HostDevice Kind = iota
	// HostPath is a file or directory of the host.
	HostPath
	// HostOption is an option that changes the host: addresses, routes or
	// NAT rules on the node, forwarding, a sysctl outside the pod's
	// network namespace, a mode that takes the master whole.
	HostOption
	// HostVLAN is a VLAN of the master the plugin makes its interface on
	// (vlan's vlanId): a network of the node's, whoever else is on it.
	HostVLAN
)

func (k Kind) String() string {
	switch k {
	case HostDevice:
		return "host device"
	case HostPath:
		return "host path"
	case HostVLAN:
		return "host VLAN"
	}
	return "host option"
}

// DefaultRouteLink is the Value of a Ref to the interface that macvlan,
// ipvlan and vlan take when their master is left out: the node's
// default-route interface, its uplink.
const DefaultRouteLink = "the node's default-route interface"

// A Ref is an object of the host that a plugin's configuration makes the
// plugin take or change.
type Ref struct {
	Kind Kind
	// Path is the dotted path of the key as written ("ipam.dataDir"); for
	// a field left out, the path it would have ("master").
	Path string
	// Field is the field the plugin reads ("master" for a key "Master");
	// "" for a string that is a path in a field of any name.
	Field string
	// Value is the device, path or option's value; for a field left
	// out, the plugin's default.
	Value string
	// Omitted: the field is left out and the plugin takes its default.
	Omitted bool
	// OfMaster: it takes or changes the master alone (a passthru
	// macvlan, a VLAN), nothing else of the host.
	OfMaster bool
	// Why says what it does to the host where its field does not, for
	// errors.
	Why string
}

// A TypeRef is an executable a configuration runs: the plugin's type or
// its IPAM's.
type TypeRef struct {
	// Path is where it is written: "type" or "ipam.type" as spelled.
	Path string
	Name string
}

// View is what a plugin's configuration makes the plugin do, as the
// plugin reads it.
type View struct {
	// Types are the executables it runs: the plugin and its IPAM.
	Types []TypeRef
	// Refs are the objects of the host it takes or changes, in path order.
	Refs []Ref
	// Problems are reasons to refuse the configuration whatever the
	// policy: a field spelled twice (the plugin would read the last one
	// of the document), a type that is not a string.
	Problems []string
}

// Inspect reads a plugin's configuration (one plugin of a list, type
// included) as the plugin will.
func Inspect(conf map[string]any) View {
	var v View
	v.walk(conf, "")
	typ := ""
	if keys := Keys(conf, "type"); len(keys) == 1 {
		s, ok := conf[keys[0]].(string)
		if !ok {
			v.Problems = append(v.Problems, fmt.Sprintf("%s: the plugin's type must be a string", keys[0]))
		}
		typ = s
		if s != "" {
			v.Types = append(v.Types, TypeRef{Path: keys[0], Name: s})
		}
	}
	if ipamKeys := Keys(conf, "ipam"); len(ipamKeys) == 1 {
		if ipam, ok := conf[ipamKeys[0]].(map[string]any); ok {
			if keys := Keys(ipam, "type"); len(keys) == 1 {
				s, ok := ipam[keys[0]].(string)
				if !ok {
					v.Problems = append(v.Problems, fmt.Sprintf("%s.%s: the IPAM plugin's type must be a string", ipamKeys[0], keys[0]))
				}
				if s != "" {
					v.Types = append(v.Types, TypeRef{Path: ipamKeys[0] + "." + keys[0], Name: s})
				}
			}
		}
	}
	if p, ok := referencePlugins[typ]; ok {
		v.plugin(conf, p)
	}
	slices.SortStableFunc(v.Refs, func(a, b Ref) int { return strings.Compare(a.Path, b.Path) })
	return v
}

// walk finds, at any depth below path, the fields every reference
// plugin reads as a host object and the strings that are absolute
// paths, and the fields spelled twice.
func (v *View) walk(x any, path string) {
	switch x := x.(type) {
	case map[string]any:
		for _, keys := range ambiguous(x) {
			v.Problems = append(v.Problems, fmt.Sprintf("%s: the keys %s set one field (keys are read regardless of letter case); write it once",
				orTop(path), quoteAll(keys)))
		}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			sub := join(path, k)
			if f, ok := deviceField(k); ok {
				if s, isString := x[k].(string); isString {
					if s != "" {
						v.Refs = append(v.Refs, Ref{Kind: HostDevice, Path: sub, Field: f, Value: s})
					}
					continue
				}
			}
			if isPathField(k) {
				if s, isString := x[k].(string); isString {
					if s != "" {
						v.Refs = append(v.Refs, Ref{Kind: HostPath, Path: sub, Field: k, Value: s})
					}
					continue
				}
			}
			v.walk(x[k], sub)
		}
	case []any:
		for i, e := range x {
			v.walk(e, fmt.Sprintf("%s[%d]", path, i))
		}
	case string:
		if strings.HasPrefix(x, "/") {
			v.Refs = append(v.Refs, Ref{Kind: HostPath, Path: path, Value: x})
		}
	}
}

// plugin adds what a reference plugin takes by default and the options
// of its that change the host, from its configuration and, for the
// fields it also reads there, from args.cni.
func (v *View) plugin(conf map[string]any, p pluginFacts) {
	for _, d := range p.defaults {
		if LeftOut(conf, d.field) {
			v.Refs = append(v.Refs, Ref{Kind: d.kind, Path: d.field, Field: d.field, Value: d.value, Omitted: true})
		}
	}
	argsPath, args := argsCNI(conf)
	for _, o := range p.hostOptions {
		key, val, ok := getPath(conf, o)
		if args != nil && slices.Contains(p.args, o) {
			// The plugin reads a value of args.cni over its own (null
			// is none).
			if k, av, aok := Get(args, o); aok && av != nil {
				key, val, ok = argsPath+"."+k, av, true
			}
		}
		if ok && truthy(val) {
			v.Refs = append(v.Refs, Ref{Kind: HostOption, Path: key, Field: LastKey(o), Value: fmt.Sprint(val)})
		}
	}
	if p.masterModes != nil {
		if key, val, ok := Get(conf, "mode"); ok {
			// The plugin reads the value as written (macvlan's
			// modeFromString); any letter case is refused alike.
			if s, isString := val.(string); isString {
				for _, m := range p.masterModes {
					if Fold(s) == Fold(m.name) {
						v.Refs = append(v.Refs, Ref{Kind: HostOption, Path: key, Field: m.name, Value: s, OfMaster: true, Why: m.why})
					}
				}
			}
		}
	}
	if p.vlanID != "" {
		key, val, ok := Get(conf, p.vlanID)
		r := Ref{Kind: HostVLAN, Path: key, Field: p.vlanID, Value: jsonValue(val), OfMaster: true}
		if !ok || val == nil {
			// Left out, the plugin makes VLAN 0: priority tags on the
			// master's untagged network.
			r.Path, r.Value, r.Omitted = p.vlanID, "0", true
		}
		v.Refs = append(v.Refs, r)
	}
	if p.sysctls {
		v.sysctls(conf, "")
		if args != nil && slices.Contains(p.args, "sysctl") {
			v.sysctls(args, argsPath)
		}
	}
}

// sysctls adds the sysctls of obj's sysctl map (obj at path) that are
// not the pod's.
func (v *View) sysctls(obj map[string]any, path string) {
	key, val, ok := Get(obj, "sysctl")
	if !ok {
		return
	}
	m, _ := val.(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if !podSysctl(name) {
			v.Refs = append(v.Refs, Ref{Kind: HostOption, Path: join(path, key) + "[" + name + "]", Field: "sysctl", Value: name})
		}
	}
}

// argsCNI is the object a plugin reads as args.cni, and its path as
// spelled; nil when there is none.
func argsCNI(conf map[string]any) (string, map[string]any) {
	argsKey, v, ok := Get(conf, "args")
	if !ok {
		return "", nil
	}
	args, _ := v.(map[string]any)
	cniKey, v, ok := Get(args, "cni")
	if !ok {
		return "", nil
	}
	cni, _ := v.(map[string]any)
	if cni == nil {
		return "", nil
	}
	return argsKey + "." + cniKey, cni
}

// getPath is the value a plugin reads at the dotted path of fields, and
// the path as spelled.
func getPath(conf map[string]any, dotted string) (string, any, bool) {
	fields := strings.Split(dotted, ".")
	var spelled []string
	obj := conf
	for i, f := range fields {
		key, v, ok := Get(obj, f)
		if !ok {
			return "", nil, false
		}
		spelled = append(spelled, key)
		if i == len(fields)-1 {
			return strings.Join(spelled, "."), v, true
		}
		if obj, ok = v.(map[string]any); !ok {
			return "", nil, false
		}
	}
	return "", nil, false
}

// podSysctl says whether tuning writes the sysctl name in the pod's
// network namespace: a net.* name (tuning writes /proc/sys/ with dots
// as slashes; anything else there is the node's).
func podSysctl(name string) bool {
	return strings.HasPrefix(name, "net.") && !strings.ContainsAny(name, "/\\") && !strings.Contains(name, "..")
}

// jsonValue is a value decoded from JSON as text: an integral number in
// decimal, a string as it is, anything else as JSON.
func jsonValue(v any) string {
	switch v := v.(type) {
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return strconv.FormatInt(int64(v), 10)
		}
	case string:
		return v
	}
	data, _ := json.Marshal(v)
	return string(data)
}

// truthy says whether an option's value turns it on: anything but false,
// null, zero (decoded as a float64 or, keeping its digits, a
// json.Number), an empty string, list or object.
func truthy(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case float64:
		return v != 0
	case json.Number:
		f, err := v.Float64()
		return err != nil || f != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case map[string]any:
		return len(v) > 0
	}
	return true
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func orTop(path string) string {
	if path == "" {
		return "the configuration"
	}
	return path
}

func quoteAll(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = fmt.Sprintf("%q", k)
	}
	return strings.Join(q, " and ")
}
