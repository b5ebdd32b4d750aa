package v1alpha1

import (
	"bytes"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/fastpath-dra/fastpath/dra/api/bounds"
)

// Decode decodes one document, JSON or YAML, of apiVersion and kind into v,
// over what v already holds (so that a claim's config can be laid over its
// class's). It decodes as the API server decodes objects: field names are
// case-sensitive, and unknown and duplicate fields are errors. Every error
// names its field below path.
func Decode(data []byte, v any, path *field.Path, apiVersion, kind string) field.ErrorList {
	js, errs := toJSON(data, path)
	if len(errs) > 0 {
		return errs
	}
	return decodeKind(js, v, path, apiVersion, kind)
}

// decodeKind is Decode of a document as JSON.
func decodeKind(js []byte, v any, path *field.Path, apiVersion, kind string) field.ErrorList {
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &meta); err != nil {
		return field.ErrorList{invalid(path, fmt.Sprintf("not a JSON object: %v", err))}
	}
	if meta.APIVersion != apiVersion || meta.Kind != kind {
		return field.ErrorList{field.Invalid(path.Child("apiVersion"), meta.APIVersion+"/"+meta.Kind,
			fmt.Sprintf("want apiVersion %s, kind %s", apiVersion, kind))}
	}
	return decodeStrict(js, v, path)
}

// DecodeStrict decodes one document, JSON or YAML, of no particular kind
// into v, as Decode does.
func DecodeStrict(data []byte, v any, path *field.Path) field.ErrorList {
	js, errs := toJSON(data, path)
	if len(errs) > 0 {
		return errs
	}
	return decodeStrict(js, v, path)
}

// boundedJSON is toJSON of a tenant's document, within the bounds: at
// most most bytes (what names the document in the error), a YAML
// document's before it is converted and the JSON it converts to (the form
// the API server holds to the same bound), and within bounds.Depth and
// bounds.Items (bounds.CheckJSON). Over one (over), the one error says
// which, and nothing is decoded.
func boundedJSON(data []byte, path *field.Path, most int, what string) (_ []byte, _ field.ErrorList, over bool) {
	if len(data) > most {
		return nil, field.ErrorList{bounds.TooLong(path, len(data), most, what)}, true
	}
	js, errs := toJSON(data, path)
	if len(errs) > 0 {
		return nil, errs, false
	}
	if err := bounds.CheckJSON(js, path, most, what); err != nil {
		return nil, field.ErrorList{err}, true
	}
	return js, nil, false
}

// toJSON is a JSON document as it is, or a YAML document as JSON; YAML's
// duplicate keys are errors.
func toJSON(data []byte, path *field.Path) ([]byte, field.ErrorList) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		return data, nil
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, field.ErrorList{invalid(path, fmt.Sprintf("not a YAML document: %v", err))}
	}
	return js, nil
}

func decodeStrict(js []byte, v any, path *field.Path) field.ErrorList {
	strict, err := sigsjson.UnmarshalStrict(js, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return field.ErrorList{invalid(path, err.Error())}
	}
	var errs field.ErrorList
	for _, e := range strict {
		// sigs.k8s.io/json says: unknown field "interface.colour".
		msg := e.Error()
		what, name, ok := strings.Cut(msg, ` field "`)
		if !ok {
			errs = append(errs, invalid(path, msg))
			continue
		}
		parts := strings.Split(strings.TrimSuffix(name, `"`), ".")
		errs = append(errs, field.Forbidden(path.Child(parts[0], parts[1:]...), what+" field"))
	}
	return errs
}

// DecodeInterfaceConfig decodes an InterfaceConfig over cfg, as Decode
// does, within the bounds of a claim's config: bounds.ConfigBytes,
// bounds.Depth and bounds.Items checked before it is decoded, then
// bounds.Addresses and bounds.Routes. Over one, the one error says which,
// and nothing else of the document is judged; what it had decoded into
// cfg is then left there.
func DecodeInterfaceConfig(data []byte, cfg *InterfaceConfig, path *field.Path) field.ErrorList {
	errs, _ := decodeInterfaceConfig(data, cfg, path)
	return errs
}

// decodeInterfaceConfig is DecodeInterfaceConfig; over says the config
// broke a bound.
func decodeInterfaceConfig(data []byte, cfg *InterfaceConfig, path *field.Path) (_ field.ErrorList, over bool) {
	js, errs, over := boundedJSON(data, path, bounds.ConfigBytes, "a config")
	if len(errs) > 0 {
		return errs, over
	}
	// dranet's form and dra-driver-sriov's, as fastpath's own.
	if js, errs = nativeJSON(js, path); len(errs) > 0 {
		return errs, false
	}
	errs = decodeKind(js, cfg, path, GroupVersion, KindInterfaceConfig)
	if err := cfg.overBounds(path); err != nil {
		return field.ErrorList{err}, true
	}
	return errs, false
}

// overBounds is the error of a list of the config longer than its bound,
// nil when none is.
func (c *InterfaceConfig) overBounds(path *field.Path) *field.Error {
	if s := c.Interface; s != nil {
		for _, b := range []struct {
			field   string
			n, most int
		}{{"addresses", len(s.Addresses), bounds.Addresses}, {"routes", len(s.Routes), bounds.Routes}, {"rules", len(s.Rules), bounds.Rules},
			{"neighbors", len(s.Neighbors), bounds.Neighbors}, {"sysctls", len(s.Sysctls), bounds.Sysctls}} {
			if err := bounds.TooMany(child(path, "interface", b.field), b.n, b.most); err != nil {
				return err
			}
		}
		if e := s.Ethtool; e != nil {
			if err := bounds.TooMany(child(path, "interface", "ethtool", "features"), len(e.Features), bounds.EthtoolSettings); err != nil {
				return err
			}
			return bounds.TooMany(child(path, "interface", "ethtool", "privateFlags"), len(e.PrivateFlags), bounds.EthtoolSettings)
		}
	}
	return nil
}

// DecodeMemifConfig decodes a memif endpoints file.
func DecodeMemifConfig(data []byte, path *field.Path) (MemifConfig, field.ErrorList) {
	var cfg MemifConfig
	errs := Decode(data, &cfg, path, GroupVersion, KindMemifConfig)
	return cfg, errs
}

// invalid is an Invalid error whose value is not repeated in the message.
func invalid(path *field.Path, detail string) *field.Error {
	return &field.Error{Type: field.ErrorTypeInvalid, Field: path.String(), BadValue: field.OmitValueType{}, Detail: detail}
}
