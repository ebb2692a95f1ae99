package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
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
// the stored values as stored (1 stays an int, 1.0 a float), then whether
// the times meet the noise policy.
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
		`","update_date":"` + r.UpdateDate + `","source_project":"p1",` +
		`"stable":false,"stats":"4 0.521 0.479 1e-05 0.9999804114573387"}`
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

// call runs a method as tirastore_call does, from the JSON of its
// arguments to the JSON of its reply, with its status.
func call(t testing.TB, st *core.Store, name, req string) (string, int) {
	t.Helper()
	m, ok := methods[name]
	if !ok {
		t.Fatalf("no method %q", name)
	}
	b, status := replyJSON(runCall(name, m, st, []byte(req)))
	return string(b), status
}

// The method lookup by program_hash (a schedule spelled otherwise
// included) replies what it replies by source: the same object, null for
// a miss.
func TestLookupByHashRepliesAsBySource(t *testing.T) {
	st := storeWithBlur(t, "p\"1")
	h := core.ProgramHash(blurSource)
	bySource, status := call(t, st, "lookup", `{"program_name":"blur","program_source_code":"void blur() { /* c */ }",`+
		`"tiralib_schedule_string":"S(L0,L1,4,8,comps=['c1'])"}`)
	if status != statusOK || !strings.HasPrefix(bySource, `{"result":{"is_legal":true,`) {
		t.Fatalf("by source: %d %s", status, bySource)
	}
	byHash, status := call(t, st, "lookup", `{"program_name":"blur","program_hash":"`+h+`",`+
		`"tiralib_schedule_string":" S( L0,L1,4,8,comps=[\"c1\"])"}`)
	if status != statusOK || byHash != bySource {
		t.Fatalf("by hash: %d %s\nwant %s", status, byHash, bySource)
	}
	miss, status := call(t, st, "lookup", `{"program_name":"blur","program_hash":"`+h+`","tiralib_schedule_string":"R(L0,comps=['c1'])"}`)
	if status != statusOK || miss != `{"result":null}` {
		t.Fatalf("miss: %d %s", status, miss)
	}
}

// BenchmarkLookupByHash is a binding's repeated lookup through the JSON
// method: the arguments parsed, the lookup (from the cache), the reply
// written.
func BenchmarkLookupByHash(b *testing.B) {
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
	reqs := make([]string, len(scheds))
	for i, s := range scheds {
		reqs[i] = `{"program_name":"blur","tiralib_schedule_string":"` + s + `","program_hash":"` + h + `"}`
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r, status := call(b, st, "lookup", reqs[i%len(reqs)]); status != statusOK {
			b.Fatal(r)
		}
	}
}
