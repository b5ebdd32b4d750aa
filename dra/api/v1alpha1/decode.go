package v1alpha1

import (
	"bytes"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
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

// DecodeInterfaceConfig decodes an InterfaceConfig over cfg.
func DecodeInterfaceConfig(data []byte, cfg *InterfaceConfig, path *field.Path) field.ErrorList {
	return Decode(data, cfg, path, GroupVersion, KindInterfaceConfig)
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
