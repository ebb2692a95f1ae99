package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/pyjson"
)

// The record the reply tests look up: its program's source and schedule.
const blurSource, blurSchedule = "void blur() { /* c */ }", "S(L0,L1,4,8,comps=['c1'])"

// storeWithBlur opens a store of source_project project in a temporary
// directory, holding one record of blurSchedule whose times keep their
// spelling (1 an int, 1.0 a float).
func storeWithBlur(t *testing.T, project string) *core.Store {
	t.Helper()
	st, err := core.Open(context.Background(), filepath.Join(t.TempDir(), "cache.db"), core.Options{CPUModel: "Test CPU", SourceProject: project})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := core.Measurement{Schedule: blurSchedule, IsLegal: true, ExecutionTimes: []pyjson.Number{"1", "1.0", "0.042", "1e-05"}}
	if _, err := st.Record(context.Background(), "blur", blurSource, m, false); err != nil {
		t.Fatal(err)
	}
	return st
}

// A lookup's reply is the original's LookupResult, in its key order, with
// the stored values as stored: 1 stays an int, 1.0 a float.
func TestReplyResultShape(t *testing.T) {
	ctx := context.Background()
	st := storeWithBlur(t, "p1")
	const src, sched = blurSource, blurSchedule
	r, err := st.Lookup(ctx, "blur", src, sched)
	if err != nil || r == nil {
		t.Fatal(r, err)
	}
	b, err := pyjson.Marshal(replyResult(r), pyjson.Compact)
	want := `{"is_legal":true,"execution_times":[1,1.0,0.042,1e-05],"schedule":"S(L0,L1,4,8,comps=['c1'])",` +
		`"hostname":"` + r.Hostname + `","username":"` + r.Username + `","creation_date":"` + r.CreationDate +
		`","update_date":"` + r.UpdateDate + `","source_project":"p1"}`
	if err != nil || string(b) != want {
		t.Fatalf("reply %s, %v\nwant  %s", b, err, want)
	}
	// A claim outcome nests the result's shape under "result".
	out, err := st.LookupOrClaim(ctx, "blur", src, sched, core.ClaimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err = pyjson.Marshal(replyClaimOutcome(out), pyjson.Compact); err != nil || string(b) != `{"result":`+want+`}` {
		t.Fatalf("outcome %s, %v", b, err)
	}
}

// tirastore_lookup's array is the lookup object's values in its order.
func TestLookupRowIsTheReplysValues(t *testing.T) {
	ctx := context.Background()
	st := storeWithBlur(t, "p\"1")
	const src, sched = blurSource, blurSchedule
	h := core.ProgramHash(src)
	row, err := lookupRow(nil, st, "blur", h, " S( L0,L1,4,8,comps=[\"c1\"])")
	if err != nil {
		t.Fatal(err)
	}
	r, err := st.Lookup(ctx, "blur", src, sched)
	if err != nil || r == nil {
		t.Fatal(r, err)
	}
	obj, err := pyjson.Marshal(replyResult(r), pyjson.Compact)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pyjson.Parse(row)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := pyjson.Parse(obj)
	var values []any
	want.(*pyjson.Object).Range(func(_ string, v any) bool { values = append(values, v); return true })
	again, _ := pyjson.Marshal(values, pyjson.Compact)
	if string(row) != string(again) || len(got.([]any)) != 8 {
		t.Fatalf("row %s\nwant %s", row, again)
	}
	if miss, err := lookupRow(nil, st, "blur", h, "R(L0,comps=['c1'])"); err != nil || string(miss) != "null" {
		t.Fatalf("miss: %s, %v", miss, err)
	}
}

func BenchmarkLookupRow(b *testing.B) {
	ctx := context.Background()
	st, err := core.Open(ctx, filepath.Join(b.TempDir(), "cache.db"), core.Options{CPUModel: "Test CPU"})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	const src = "void blur() { /* c */ }"
	var scheds []string
	for i := 0; i < 1000; i++ {
		scheds = append(scheds, fmt.Sprintf("T2(L0,L1,0,%d,comps=['conv'])|U(L2,4,comps=['conv'])", i))
	}
	var ms []core.Measurement
	for _, s := range scheds {
		ms = append(ms, core.Measurement{Schedule: s, IsLegal: true, ExecutionTimes: core.Times(0.1, 0.105, 0.11)})
	}
	if _, err := st.RecordMany(ctx, "blur", src, ms, false); err != nil {
		b.Fatal(err)
	}
	h := core.ProgramHash(src)
	buf := make([]byte, 0, 512)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := lookupRow(buf, st, "blur", h, scheds[i%len(scheds)]); err != nil {
			b.Fatal(err)
		}
	}
}
