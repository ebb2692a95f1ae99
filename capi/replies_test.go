package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/pyjson"
)

// A lookup's reply is the original's LookupResult, in its key order, with
// the stored values as stored: 1 stays an int, 1.0 a float.
func TestReplyResultShape(t *testing.T) {
	ctx := context.Background()
	st, err := core.Open(ctx, filepath.Join(t.TempDir(), "cache.db"), core.Options{CPUModel: "Test CPU", SourceProject: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const src, sched = "void blur() { /* c */ }", "S(L0,L1,4,8,comps=['c1'])"
	m := core.Measurement{Schedule: sched, IsLegal: true, ExecutionTimes: []pyjson.Number{"1", "1.0", "0.042", "1e-05"}}
	if _, err := st.Record(ctx, "blur", src, m, false); err != nil {
		t.Fatal(err)
	}
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
