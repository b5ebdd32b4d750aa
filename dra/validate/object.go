package validate

import (
	"encoding/json"
	"errors"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/fastpath-dra/fastpath/dra/npwg"
)

// whyNotJudged is a Skip's reason for an object of a kind validate does
// not judge.
const whyNotJudged = "not a kind validate judges"

// Verdict is the judgement of one object on its own.
type Verdict struct {
	// Judged is false for an object of a kind validate does not judge.
	Judged bool
	// Problems are what is wrong with the object, each naming its field.
	Problems []Problem
	// Partly, when not empty, says why the object was judged only in part
	// (a NetworkAttachmentDefinition whose configuration is a node's file).
	Partly string
}

// Object judges one object, as JSON, as CheckManifests judges it among no
// other inputs (an admission review's object): the DeviceClasses are the
// chart's, no CNIConfig is known approved, and a pod's claims and
// PodNetworkAttachments are not looked up. namespace is the object's when
// its metadata names none (the request's). An object that does not decode
// is judged, and the decoder's errors are its problems.
func Object(js []byte, namespace string, check Check, nads npwg.ConfigRules) Verdict {
	m := &Manifest{file: "<object>", line: 1, js: js}
	if err := json.Unmarshal(js, &m.meta); err != nil {
		detail := err.Error()
		if ute, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			detail = "it is a JSON " + ute.Value
			if ute.Field != "" {
				detail = ute.Field + " is a JSON " + ute.Value
			}
		}
		return Verdict{Judged: true, Problems: []Problem{{Err: field.Invalid(nil, field.OmitValueType{}, "not a Kubernetes object: "+detail)}}}
	}
	if m.meta.Metadata.Namespace == "" {
		m.meta.Metadata.Namespace = namespace
	}
	findings, skipped := CheckManifests([]*Manifest{m}, check, nads)
	v := Verdict{Judged: true}
	for _, s := range skipped {
		if s.Why == whyNotJudged {
			return Verdict{}
		}
		v.Partly = s.Why
	}
	for _, f := range findings {
		v.Problems = append(v.Problems, f.Problem)
	}
	return v
}
