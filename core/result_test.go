package core

import (
	"math"
	"slices"
	"testing"

	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/storage"
)

// A hit passes a canonical result_json's list through as stored; the reply
// must read, in Python, as the general parse and re-encoding would, and the
// Go fields must be the same. Non-canonical forms take the general path.
func TestCanonicalResultPassThrough(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		rj        string
		canonical bool
	}{
		{`{"is_legal":true,"execution_times":[1.5,2.0,3]}`, true},
		{`{"is_legal":false,"execution_times":null}`, true},
		{`{"is_legal":true,"execution_times":[]}`, true},
		{`{"is_legal":true,"execution_times":[NaN,Infinity,-Infinity,1e400,-0.0]}`, true},
		{`{"is_legal":true,"execution_times":[1.50,1E5]}`, true},
		{`{"is_legal": true, "execution_times": [1.5, 2.0]}`, false}, // spaces
		{`{"execution_times":[1.5],"is_legal":true}`, false},         // key order
		{`{"is_legal":1,"execution_times":[1.5]}`, false},
		{`{"is_legal":true,"execution_times":[[1.5]]}`, false},
		{`{"is_legal":true,"execution_times":["1.5"]}`, false},
		{`{"is_legal":true,"execution_times":[1.5],"x":1}`, false},
	} {
		rec := &storage.Record{Key: "k", ResultJSON: c.rj}
		got, err := resultOf(rec)
		if err != nil {
			t.Fatalf("%s: %v", c.rj, err)
		}
		var probe Result
		if ok := probe.fromCanonical(c.rj); ok != c.canonical {
			t.Errorf("%s: canonical %v, want %v", c.rj, ok, c.canonical)
		}
		// The general path, as before the pass-through.
		legal, times, err := ParseResult(rec.Key, rec.ResultJSON)
		if err != nil {
			t.Fatal(err)
		}
		wantDoc, _ := pyjson.Marshal(map[string]any{"l": legal, "t": times}, pyjson.Compact)
		gotDoc, _ := pyjson.Marshal(map[string]any{"l": got.legal, "t": got.times}, pyjson.Compact)
		// Same values once parsed again (the raw list keeps its number
		// spelling, "1.50" for 1.5, which a parser reads alike).
		wv, err1 := pyjson.Parse(wantDoc)
		gv, err2 := pyjson.Parse(gotDoc)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: reply not JSON: %v %v (%s)", c.rj, err1, err2, gotDoc)
		}
		if !sameValues(t, wv, gv) {
			t.Errorf("%s: reply %s, the general path gives %s", c.rj, gotDoc, wantDoc)
		}
		var wantTimes []float64
		if list, ok := times.([]any); ok {
			for _, x := range list {
				if n, ok := x.(pyjson.Number); ok {
					f, _ := n.Float64()
					wantTimes = append(wantTimes, f)
				}
			}
			if wantTimes == nil {
				wantTimes = []float64{}
			}
		}
		if !slices.EqualFunc(got.ExecutionTimes, wantTimes, func(a, b float64) bool {
			return a == b || math.IsNaN(a) && math.IsNaN(b)
		}) || (got.ExecutionTimes == nil) != (wantTimes == nil) {
			t.Errorf("%s: ExecutionTimes %v, want %v", c.rj, got.ExecutionTimes, wantTimes)
		}
		wantLegal := legal == true
		if n, ok := legal.(pyjson.Number); ok {
			f, _ := n.Float64()
			wantLegal = f != 0
		}
		if got.IsLegal != wantLegal {
			t.Errorf("%s: IsLegal %v, want %v", c.rj, got.IsLegal, wantLegal)
		}
	}
}

// A result_json that is not JSON is reported by the general path, also
// when it starts like a canonical one.
func TestCanonicalPrefixInvalidJSON(t *testing.T) {
	t.Parallel()
	for _, rj := range []string{`{"is_legal":true,"execution_times":[1.5,]}`, `{"is_legal":true,"execution_times":[1.5`} {
		if _, err := resultOf(&storage.Record{Key: "k", ResultJSON: rj}); KindOf(err) != KindValue {
			t.Errorf("%s: %v, want a ValueError", rj, err)
		}
	}
}

// sameValues compares two parsed documents by value (numbers by the float
// or int Python would make of them).
func sameValues(t *testing.T, a, b any) bool {
	t.Helper()
	switch x := a.(type) {
	case *pyjson.Object:
		y, ok := b.(*pyjson.Object)
		if !ok || !slices.Equal(x.Keys(), y.Keys()) {
			return false
		}
		for _, k := range x.Keys() {
			xv, _ := x.Get(k)
			yv, _ := y.Get(k)
			if !sameValues(t, xv, yv) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValues(t, x[i], y[i]) {
				return false
			}
		}
		return true
	case pyjson.Number:
		y, ok := b.(pyjson.Number)
		if !ok || x.IsInt() != y.IsInt() {
			return false
		}
		fx, _ := x.Float64()
		fy, _ := y.Float64()
		return fx == fy || math.IsNaN(fx) && math.IsNaN(fy)
	}
	return a == b
}

// BenchmarkHitReply: building and encoding a hit's reply, with the
// pass-through and with the general parse it replaces.
func BenchmarkHitReply(b *testing.B) {
	rec := &storage.Record{Key: "k", Schedule: "S(L0,L1,4,8,comps=['c1'])", Hostname: "node01", Username: "u",
		CreationDate: "2026-12-01T00:00:00.000000", UpdateDate: "2026-12-01T00:00:00.000000",
		ResultJSON: `{"is_legal":true,"execution_times":[1.234567,1.2345678,1.23456789,1.2,1.25]}`}
	b.Run("pass-through", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r, _ := resultOf(rec)
			_, _ = pyjson.Marshal(r, pyjson.Compact)
		}
	})
	b.Run("general", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r := &Result{Schedule: rec.Schedule}
			r.legal, r.times, _ = ParseResult(rec.Key, rec.ResultJSON)
			_, _ = pyjson.Marshal(r, pyjson.Compact)
		}
	})
}

// The first lookup of a new source hashes it once: the binding's
// make_program_hash that follows (to send the hash from then on, capi's
// make_program_hash is ProgramHash) and the later lookups by source find
// it remembered.
func TestNewSourceHashedOnce(t *testing.T) {
	// Not parallel: it counts the process's hash computations.
	st := openTemp(t, Options{CPUModel: "X"})
	count := func() int {
		progHashes.mu.Lock()
		defer progHashes.mu.Unlock()
		return progHashes.computed
	}
	step := func(what string, want int, fn func()) {
		t.Helper()
		before := count()
		fn()
		if n := count() - before; n != want {
			t.Fatalf("%s: %d hashes computed, want %d", what, n, want)
		}
	}
	other := "void other() { /* " + t.Name() + " */ }"
	step("ProgramHash of a new source", 1, func() { ProgramHash(other) })
	source := "void once() { /* " + t.Name() + " */ }"
	step("first lookup", 1, func() {
		if _, err := st.Lookup(ctx, "p", source, sched); err != nil {
			t.Fatal(err)
		}
	})
	step("ProgramHash after it", 0, func() {
		if h := ProgramHash(source); h != keys.ProgramHash(source) {
			t.Fatalf("ProgramHash = %s", h)
		}
	})
	step("contains and record by source", 0, func() {
		if _, err := st.Contains(ctx, "p", source, sched); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Record(ctx, "p", source, Measurement{Schedule: sched, IsLegal: false}, false); err != nil {
			t.Fatal(err)
		}
	})
}
