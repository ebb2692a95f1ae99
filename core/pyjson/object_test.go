package pyjson

import (
	"reflect"
	"testing"
)

func TestObjectDictSemantics(t *testing.T) {
	o := NewObject()
	o.Set("b", 1)
	o.Set("a", 2)
	o.Set("c", 3)
	o.Set("b", 4) // replaces, keeps position
	if got, want := o.Keys(), []string{"b", "a", "c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Keys() = %v, want %v", got, want)
	}
	if v, ok := o.Get("b"); !ok || v != 4 {
		t.Errorf("Get(b) = %v, %v; want 4, true", v, ok)
	}
	if v, ok := o.Get("zz"); ok || v != nil {
		t.Errorf("Get(zz) = %v, %v; want nil, false", v, ok)
	}
	if o.Len() != 3 {
		t.Errorf("Len() = %d, want 3", o.Len())
	}
	// Keys returns a copy.
	k := o.Keys()
	k[0] = "mutated"
	if o.Keys()[0] != "b" {
		t.Error("Keys() aliases internal storage")
	}
	// Delete then re-add moves the key to the end, like del d[k]; d[k] = v.
	if !o.Delete("b") || o.Delete("b") {
		t.Error("Delete(b) should succeed once")
	}
	o.Set("b", 5)
	if got, want := o.Keys(), []string{"a", "c", "b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after delete/re-add Keys() = %v, want %v", got, want)
	}
	for _, k := range []string{"a", "c", "b"} {
		if _, ok := o.Get(k); !ok {
			t.Errorf("Get(%s) missing after Delete", k)
		}
	}
	var seen []string
	o.Range(func(k string, v any) bool {
		seen = append(seen, k)
		return k != "c"
	})
	if want := []string{"a", "c"}; !reflect.DeepEqual(seen, want) {
		t.Errorf("Range stopped wrongly: %v, want %v", seen, want)
	}
}

func TestObjectZeroAndNil(t *testing.T) {
	var z Object
	z.Set("x", true)
	if v, ok := z.Get("x"); !ok || v != true || z.Len() != 1 {
		t.Errorf("zero Object unusable: %v %v %d", v, ok, z.Len())
	}
	var n *Object
	if n.Len() != 0 || n.Keys() != nil || n.Delete("x") {
		t.Error("nil *Object should read as empty")
	}
	if _, ok := n.Get("x"); ok {
		t.Error("nil *Object Get found a key")
	}
	n.Range(func(string, any) bool { t.Error("Range on nil called fn"); return true })
	if b, err := Marshal(n, Default); err != nil || string(b) != "{}" {
		t.Errorf("Marshal(nil *Object) = %q, %v; want {}", b, err)
	}
}
