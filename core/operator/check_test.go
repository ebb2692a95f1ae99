package operator

import (
	"os/exec"
	"testing"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/storage"
)

// plant writes a claim row of another worker.
func plant(t *testing.T, st *core.Store, c *storage.Claim) {
	t.Helper()
	err := st.Backend().UpdateClaims(ctx, "plant", func(w storage.ClaimWriter) error { return w.PutClaim(c) })
	if err != nil {
		t.Fatal(err)
	}
}

// TestCheckFindsStaleClaims: check reports the claim of a dead holder of
// this host and one whose schedule is recorded, not a live one; --repair
// removes the stale ones only.
func TestCheckFindsStaleClaims(t *testing.T) {
	a := openTemp(t, core.Options{})
	live, err := a.LookupOrClaim(ctx, "blur", src, "R(L0,comps=['c1'])", core.ClaimOptions{})
	if err != nil || live.Claim == nil {
		t.Fatal(live, err)
	}
	// The live claim's row is this process's: a copy with the pid of a
	// process that has exited is a dead holder's of this host.
	var mine *storage.Claim
	if err := a.Backend().View(ctx, "read", func(r storage.Reader) error {
		return r.EachClaim(func(c *storage.Claim) error { mine = c; return nil })
	}); err != nil || mine == nil {
		t.Fatal(mine, err)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	h := keys.ProgramHash(src)
	dead := *mine
	dead.Key, dead.Schedule, dead.Token = keys.RecordKey(h, sched), sched, "t-dead"
	dead.PID, dead.StartTime = cmd.Process.Pid, 1
	plant(t, a, &dead)
	other := "U(L2,4,comps=['c1'])"
	if ok, err := a.Record(ctx, "blur", src, core.Measurement{Schedule: other, IsLegal: false}, false); !ok || err != nil {
		t.Fatal(ok, err)
	}
	plant(t, a, &storage.Claim{Key: keys.RecordKey(h, other), ProgramHash: h, ProgramName: "blur", Schedule: other,
		Token: "t-recorded", Hostname: "elsewhere", PID: 7, LeaseSeconds: 60,
		ClaimedAt: "2026-01-01 00:00:00", RenewedAt: "2026-01-01 00:00:00"})
	rep, err := CheckDatabase(ctx, a.Path(), core.Options{}, false, JournalReport)
	if err != nil || len(rep.StaleClaims) != 2 || len(rep.Problems) != 2 {
		t.Fatalf("check: %+v %v", rep, err)
	}
	if rep, err = CheckDatabase(ctx, a.Path(), core.Options{}, true, JournalReport); err != nil || len(rep.Repaired) != 2 || len(rep.Problems) != 0 {
		t.Fatalf("repair: %+v %v", rep, err)
	}
	left, err := a.Claims(ctx)
	if err != nil || len(left) != 1 || left[0].Schedule != "R(L0,comps=['c1'])" {
		t.Fatalf("left: %+v %v", left, err)
	}
}

// TestCheckLeavesItsSummary: a check leaves its summary in the database
// (what the dashboard shows), the next check replaces it, and a database
// never checked has none.
func TestCheckLeavesItsSummary(t *testing.T) {
	a := openTemp(t, core.Options{})
	if sum, err := LastCheck(ctx, a); err != nil || sum != nil {
		t.Fatalf("never checked: %+v %v", sum, err)
	}
	if _, err := a.Record(ctx, "blur", src, core.Measurement{Schedule: sched, IsLegal: false}, false); err != nil {
		t.Fatal(err)
	}
	plant(t, a, &storage.Claim{Key: keys.RecordKey(keys.ProgramHash(src), sched), ProgramHash: keys.ProgramHash(src),
		ProgramName: "blur", Schedule: sched, Token: "t", Hostname: "elsewhere", PID: 7, LeaseSeconds: 60,
		ClaimedAt: "2026-01-01 00:00:00", RenewedAt: "2026-01-01 00:00:00"})
	if _, err := CheckDatabase(ctx, a.Path(), core.Options{}, false, JournalReport); err != nil {
		t.Fatal(err)
	}
	sum, err := LastCheck(ctx, a)
	if err != nil || sum == nil || sum.OK || sum.Problems != 1 || len(sum.First) != 1 || sum.Records != 1 || sum.Date == "" {
		t.Fatalf("after a check with a problem: %+v %v", sum, err)
	}
	if _, err := CheckDatabase(ctx, a.Path(), core.Options{}, true, JournalReport); err != nil {
		t.Fatal(err)
	}
	if sum, err = LastCheck(ctx, a); err != nil || !sum.OK || sum.Problems != 0 || sum.Repaired != 1 {
		t.Fatalf("after the repair: %+v %v", sum, err)
	}
}
