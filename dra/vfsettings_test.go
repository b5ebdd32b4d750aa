package dra

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/fastpath-dra/fastpath/dataplane"
	"github.com/fastpath-dra/fastpath/dra/api/v1alpha1"
	"github.com/fastpath-dra/fastpath/dra/claims"
)

// TestVFConversions: a VF setting goes from the config API
// (v1alpha1.VFConfig) to the record (claims.VFSettings, vfSettings) and on
// to the dataplane (dataplane.VFSettings, pfSettings), and the state the PF
// reports goes to the record (recordVFState) and back. Every field of each
// type is set in turn, alone and all together, and must come out in the
// field of the same name with the same value: a setting added to one type
// and left out of a conversion fails here.
func TestVFConversions(t *testing.T) {
	t.Run("settings to the dataplane", func(t *testing.T) {
		for rec := range eachFieldSet[claims.VFSettings](t) {
			set, _ := pfSettings(&claims.VF{Set: rec, Before: &claims.VFState{}})
			sameFields(t, "claims.VFSettings", rec, "dataplane.VFSettings", set, nil)
		}
	})
	t.Run("state to the dataplane", func(t *testing.T) {
		for rec := range eachFieldSet[claims.VFState](t) {
			_, before := pfSettings(&claims.VF{Before: &rec})
			sameFields(t, "claims.VFState", rec, "dataplane.VFState", before, nil)
			if back := recordVFState(before); *back != rec {
				t.Errorf("claims.VFState %+v to the dataplane and back is %+v", rec, *back)
			}
		}
	})
	t.Run("state to the record", func(t *testing.T) {
		for st := range eachFieldSet[dataplane.VFState](t) {
			rec := recordVFState(st)
			sameFields(t, "dataplane.VFState", st, "claims.VFState", *rec, nil)
			if _, back := pfSettings(&claims.VF{Before: rec}); back != st {
				t.Errorf("dataplane.VFState %+v to the record and back is %+v", st, back)
			}
		}
	})
	t.Run("config to the record", func(t *testing.T) {
		// The API's rates are named with their unit; the record's MAC is
		// the interface's (so that the PF's spoof check lets it through).
		apiName := map[string]string{"MinTxRate": "MinTxRateMbps", "MaxTxRate": "MaxTxRateMbps", "MAC": ""}
		const mac = "02:00:00:00:00:01"
		for vf := range eachFieldSet[v1alpha1.VFConfig](t) {
			rec := vfSettings(v1alpha1.InterfaceConfig{Mode: v1alpha1.ModeNetdev, VF: &vf, Interface: &v1alpha1.InterfaceSpec{MAC: mac}})
			if rec == nil {
				t.Fatalf("v1alpha1.VFConfig %+v made no settings", vf)
			}
			sameFields(t, "v1alpha1.VFConfig", vf, "claims.VFSettings", *rec, apiName)
			if rec.MAC != mac {
				t.Errorf("claims.VFSettings.MAC is %q, want the interface's %q", rec.MAC, mac)
			}
		}
	})
}

// eachFieldSet yields values of the struct type T: one with each field
// set alone, then one with every field set. Each field's value is its
// own (its index, where its type allows), so that a conversion that
// swaps two fields is told from one that carries them.
func eachFieldSet[T any](t *testing.T) func(yield func(T) bool) {
	t.Helper()
	typ := reflect.TypeFor[T]()
	if typ.Kind() != reflect.Struct || typ.NumField() == 0 {
		t.Fatalf("%s is not a struct with fields", typ)
	}
	return func(yield func(T) bool) {
		var all T
		for i := range typ.NumField() {
			var one T
			setField(t, reflect.ValueOf(&one).Elem(), i)
			setField(t, reflect.ValueOf(&all).Elem(), i)
			if !yield(one) {
				return
			}
		}
		yield(all)
	}
}

// setField gives field i of the struct v a non-zero value of its own.
func setField(t *testing.T, v reflect.Value, i int) {
	t.Helper()
	f := v.Field(i)
	if !setValue(f, i+1) {
		t.Fatalf("%s.%s: the test has no value for a %s: teach setValue one", v.Type(), v.Type().Field(i).Name, f.Type())
	}
}

func setValue(v reflect.Value, n int) bool {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(n))
	case reflect.String:
		v.SetString(fmt.Sprintf("value %d", n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		if !setValue(p.Elem(), n) {
			return false
		}
		v.Set(p)
	default:
		return false
	}
	return true
}

// sameFields checks that to, converted from from, has every field of from
// and no other, each with from's value. rename maps a field of to to its
// name in from; "" for a field from does not have (it is then not
// compared).
func sameFields(t *testing.T, fromName string, from any, toName string, to any, rename map[string]string) {
	t.Helper()
	fv, tv := reflect.ValueOf(from), reflect.ValueOf(to)
	carried := map[string]bool{}
	for i := range tv.NumField() {
		name := tv.Type().Field(i).Name
		src, renamed := rename[name]
		if !renamed {
			src = name
		}
		if src == "" {
			continue
		}
		got, want := tv.Field(i), fv.FieldByName(src)
		if !want.IsValid() {
			t.Errorf("%s.%s has no field %s in %s to come from", toName, name, src, fromName)
			continue
		}
		carried[src] = true
		if !reflect.DeepEqual(got.Interface(), want.Interface()) {
			t.Errorf("%s.%s is %s, want %s.%s's %s", toName, name, show(got), fromName, src, show(want))
		}
	}
	for i := range fv.NumField() {
		if name := fv.Type().Field(i).Name; !carried[name] {
			t.Errorf("%s.%s is not carried to %s", fromName, name, toName)
		}
	}
}

func show(v reflect.Value) string {
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		return fmt.Sprintf("&%v", v.Elem())
	}
	return fmt.Sprintf("%v", v)
}
