package dra

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pnv1 "github.com/fastpath-dra/fastpath/dra/api/podnetwork/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// podNetworkObjects serves PodNetworks and PodNetworkAttachments from maps.
type podNetworkObjects struct {
	networks    map[string]*pnv1.PodNetwork
	attachments map[string]*pnv1.PodNetworkAttachment
}

func (o podNetworkObjects) GetPodNetwork(_ context.Context, name string) (*pnv1.PodNetwork, error) {
	if pn, ok := o.networks[name]; ok {
		return pn, nil
	}
	return nil, errors.New("not found")
}

func (o podNetworkObjects) GetPodNetworkAttachment(_ context.Context, namespace, name string) (*pnv1.PodNetworkAttachment, error) {
	if pna, ok := o.attachments[namespace+"/"+name]; ok {
		return pna, nil
	}
	return nil, errors.New("not found")
}

func readyCondition(ready bool, reason string) []metav1.Condition {
	st := metav1.ConditionTrue
	if !ready {
		st = metav1.ConditionFalse
	}
	return []metav1.Condition{{Type: pnv1.ConditionReady, Status: st, Reason: reason}}
}

// TestPrepareNamesPodNetwork: a claim whose config names a PodNetwork, or
// a PodNetworkAttachment of its namespace, is prepared once the KEP's
// active validation passes, its device recorded as the pod's attachment to
// that PodNetwork; a PodNetwork not Ready, disabled, of another provider
// or missing, or a node without --podnetworks, refuses it, saying why.
func TestPrepareNamesPodNetwork(t *testing.T) {
	objects := podNetworkObjects{networks: map[string]*pnv1.PodNetwork{
		"fast":    {ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Status: pnv1.PodNetworkStatus{Conditions: readyCondition(true, pnv1.ReasonReady)}},
		"pending": {ObjectMeta: metav1.ObjectMeta{Name: "pending"}, Status: pnv1.PodNetworkStatus{Conditions: readyCondition(false, pnv1.ReasonParamsNotReady)}},
		"off":     {ObjectMeta: metav1.ObjectMeta{Name: "off"}, Spec: pnv1.PodNetworkSpec{Enabled: new(false)}},
		"theirs":  {ObjectMeta: metav1.ObjectMeta{Name: "theirs"}, Spec: pnv1.PodNetworkSpec{Provider: "example.com/other"}},
	}, attachments: map[string]*pnv1.PodNetworkAttachment{
		"default/fast-att": {ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fast-att"}, Spec: pnv1.PodNetworkAttachmentSpec{PodNetworkName: "fast"},
			Status: pnv1.PodNetworkAttachmentStatus{Conditions: readyCondition(true, pnv1.ReasonReady)}},
	}}
	direct := testClaim("direct", []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(`"podNetwork": "fast"`)))
	via := testClaim("via", []alloc{{Request: "nic", Device: vfNetdev2}}, fromClaim(config(`"podNetworkAttachment": "fast-att"`)))
	bad := []struct{ config, want string }{
		{`"podNetwork": "pending"`, "PodNetwork pending: not Ready: ParamsNotReady"},
		{`"podNetwork": "off"`, "PodNetwork off: AdministrativelyDisabled"},
		{`"podNetwork": "theirs"`, "its provider is example.com/other"},
		{`"podNetwork": "nowhere"`, "PodNetwork nowhere: not found"},
		{`"podNetworkAttachment": "x"`, "PodNetworkAttachment default/x"},
	}
	objs := []*fakeObject{{direct}, {via}}
	for i, b := range bad {
		objs = append(objs, &fakeObject{testClaim(fmt.Sprintf("bad%d", i), []alloc{{Request: "nic", Device: vfNetdev}}, fromClaim(config(b.config)))})
	}
	d, k, ctx := startTestDriver(t, objs...)
	if e := prepare(t, ctx, k, direct); !strings.Contains(e, "fastpathd run --podnetworks is off") || !strings.Contains(e, "claim default/direct") {
		t.Errorf("without --podnetworks: %q, want the claim refused, saying so", e)
	}
	d.Driver.opts.PodNetworks = objects
	for _, c := range []*fakeObject{objs[0], objs[1]} {
		if e := prepare(t, ctx, k, c.claim); e != "" {
			t.Fatalf("prepare %s: %s", c.claim.Name, e)
		}
		rec, _ := d.store.Get(claims.Key{Driver: claims.DriverFastpath, UID: c.claim.UID})
		if got := rec.Devices[0].PodNetwork; got != "fast" {
			t.Errorf("claim %s: device recorded on PodNetwork %q, want fast", c.claim.Name, got)
		}
		unprepare(t, ctx, k, c.claim)
	}
	for i, b := range bad {
		e := prepare(t, ctx, k, objs[2+i].claim)
		if !strings.Contains(e, b.want) || !strings.Contains(e, `request "nic"`) {
			t.Errorf("%s: %q, want the claim refused, saying %q", b.config, e, b.want)
		}
	}
	assertNothingLeft(t, d)
}
