package pyjson

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func TestObjectDictSemantics(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// TestObjectAcrossIndexThreshold checks Set, Get, Delete and order against
// a plain model with objects growing past smallObject (where the index map
// appears) and shrinking below it again, with repeated and deleted keys.
func TestObjectAcrossIndexThreshold(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for run := 0; run < 200; run++ {
		o := NewObject()
		var model []string // keys in order
		vals := map[string]int{}
		for step := 0; step < 60; step++ {
			k := fmt.Sprintf("k%d", rng.IntN(3*smallObject))
			switch rng.IntN(3) {
			case 0, 1:
				o.Set(k, step)
				if _, ok := vals[k]; !ok {
					model = append(model, k)
				}
				vals[k] = step
			case 2:
				_, had := vals[k]
				if got := o.Delete(k); got != had {
					t.Fatalf("run %d step %d: Delete(%s) = %v, want %v", run, step, k, got, had)
				}
				if had {
					delete(vals, k)
					model = slices.DeleteFunc(model, func(m string) bool { return m == k })
				}
			}
			if !slices.Equal(o.Keys(), model) {
				t.Fatalf("run %d step %d: keys %v, want %v", run, step, o.Keys(), model)
			}
			for _, m := range model {
				if v, ok := o.Get(m); !ok || v != vals[m] {
					t.Fatalf("run %d step %d: Get(%s) = %v, %v; want %d", run, step, m, v, ok, vals[m])
				}
			}
			if _, ok := o.Get("absent"); ok {
				t.Fatal("Get of an absent key found it")
			}
		}
	}
}
