package core

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/liveness"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/storage"
)

// twoStores opens two stores of one database (two workers).
func twoStores(t *testing.T) (*Store, *Store) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cache.db")
	var out [2]*Store
	for i := range out {
		st, err := Open(ctx, p, Options{CPUModel: "Test CPU"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		out[i] = st
	}
	return out[0], out[1]
}

// waitFor starts st's LookupOrClaim of sched with Wait in a goroutine: its
// outcome arrives on the channel.
func waitFor(t *testing.T, st *Store) <-chan ClaimOutcome {
	got := make(chan ClaimOutcome, 1)
	go func() {
		o, err := st.LookupOrClaim(ctx, "blur", src, sched, ClaimOptions{Wait: true})
		if err != nil {
			t.Error(err)
		}
		got <- o
	}()
	return got
}

var measured = Measurement{IsLegal: true, ExecutionTimes: []pyjson.Number{"0.5"}}

func TestClaimRecordAndBusy(t *testing.T) {
	t.Parallel()
	a, b := twoStores(t)
	o, err := a.LookupOrClaim(ctx, "blur", src, sched, ClaimOptions{})
	if err != nil || o.Claim == nil || o.Claim.Lease() != 60*time.Second {
		t.Fatalf("first: %+v %v", o, err)
	}
	busy, err := b.LookupOrClaim(ctx, "blur", src, " S(L0, L1,4,8,comps=[\"c1\"])", ClaimOptions{})
	if err != nil || busy.Busy == nil || busy.Busy.PID != os.Getpid() || busy.Busy.Schedule != sched {
		t.Fatalf("second: %+v %v", busy, err)
	}
	// A waiter gets the result once it is recorded.
	got := waitFor(t, b)
	time.Sleep(100 * time.Millisecond)
	if wrote, err := o.Claim.Record(ctx, measured); !wrote || err != nil {
		t.Fatalf("record: %v %v", wrote, err)
	}
	if w := <-got; w.Result == nil || w.Result.ExecutionTimes[0] != 0.5 {
		t.Fatalf("waiter: %+v", w)
	}
	if wrote, err := o.Claim.Record(ctx, measured); wrote || err == nil || KindOf(err) != KindValue {
		t.Fatalf("second record of an ended claim: %v %v", wrote, err)
	}
	cl, err := a.Claims(ctx)
	if err != nil || len(cl) != 0 {
		t.Fatalf("claims left: %v %v", cl, err)
	}
}

func TestClaimReleaseHandsOver(t *testing.T) {
	t.Parallel()
	a, b := twoStores(t)
	o, _ := a.LookupOrClaim(ctx, "blur", src, sched, ClaimOptions{})
	got := waitFor(t, b)
	time.Sleep(100 * time.Millisecond)
	if err := o.Claim.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w.Claim == nil {
		t.Fatalf("waiter did not get the claim: %+v", w)
	}
	if wrote, err := w.Claim.Record(ctx, measured); !wrote || err != nil {
		t.Fatalf("record: %v %v", wrote, err)
	}
}

// plant writes a claim row of another worker.
func plant(t *testing.T, st *Store, c *storage.Claim) {
	t.Helper()
	err := st.be.UpdateClaims(ctx, "plant", func(w storage.ClaimWriter) error { return w.PutClaim(c) })
	if err != nil {
		t.Fatal(err)
	}
}

func foreignClaim(host string, pid int, p liveness.Process, lease float64) *storage.Claim {
	h := keys.ProgramHash(src)
	return &storage.Claim{Key: keys.RecordKey(h, sched), ProgramHash: h, ProgramName: "blur", Schedule: sched,
		Token: "t-" + host, Hostname: host, PID: pid, StartTime: p.StartTime, BootID: p.BootID, PIDNS: p.PIDNS,
		LeaseSeconds: lease, ClaimedAt: "2026-01-01 00:00:00", RenewedAt: "2026-01-01 00:00:00"}
}

// plantDeadHolder plants a claim, with a lease of an hour, of a process of
// this host that has exited, and returns its pid.
func plantDeadHolder(t *testing.T, st *Store) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	me := liveness.Self()
	plant(t, st, foreignClaim(st.hostname, cmd.Process.Pid, liveness.Process{StartTime: 1, BootID: me.BootID, PIDNS: me.PIDNS}, 3600))
	return cmd.Process.Pid
}

// TestDeadHolderOnThisHostTakenOverAtOnce: a claim of a dead process of
// this host goes to the next caller without waiting for its lease; one of
// a live process of this host does not.
func TestDeadHolderOnThisHostTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	a, _ := twoStores(t)
	plantDeadHolder(t, a)
	start := time.Now()
	o, err := a.LookupOrClaim(ctx, "blur", src, sched, ClaimOptions{Wait: true})
	if err != nil || o.Claim == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("dead holder: %+v %v after %v", o, err, time.Since(start))
	}
	o.Claim.Release(ctx)
	// Negative control: the same claim row with a live pid stays busy.
	me := liveness.Self()
	plant(t, a, foreignClaim(a.hostname, os.Getppid(), liveness.Process{BootID: me.BootID, PIDNS: me.PIDNS}, 3600))
	if o, err := a.LookupOrClaim(ctx, "blur", src, sched, ClaimOptions{}); err != nil || o.Busy == nil {
		t.Fatalf("live holder: %+v %v", o, err)
	}
}

// TestLeaseExpiresOnTheWaitersClock: a claim of another host that is
// never renewed is taken over after its lease as seen by the waiter,
// whatever its dates say; renewed, it is not.
func TestLeaseExpiresOnTheWaitersClock(t *testing.T) {
	t.Parallel()
	a, b := twoStores(t)
	plant(t, a, foreignClaim("elsewhere", 1, liveness.Process{}, 0.5))
	start := time.Now()
	o, err := a.LookupOrClaim(ctx, "blur", src, sched, ClaimOptions{Wait: true})
	if el := time.Since(start); err != nil || o.Claim == nil || el < 450*time.Millisecond || el > 5*time.Second {
		t.Fatalf("expiry: %+v %v after %v", o, err, el)
	}
	// A live holder with a short lease renews it: a waiter does not take
	// it over in several leases.
	o.Claim.Release(ctx)
	held, err := a.LookupOrClaim(ctx, "blur", src, sched, ClaimOptions{Lease: 300 * time.Millisecond})
	if err != nil || held.Claim == nil {
		t.Fatal(held, err)
	}
	tctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	w, err := b.LookupOrClaim(tctx, "blur", src, sched, ClaimOptions{Wait: true})
	if err == nil || w.Claim != nil || held.Claim.TakenOver() {
		t.Fatalf("a renewed claim was taken over: %+v %v", w, err)
	}
}

func TestClaimValidationAndBatch(t *testing.T) {
	t.Parallel()
	a, b := twoStores(t)
	if _, err := a.LookupOrClaim(ctx, "blur", src, "S(L0", ClaimOptions{}); KindOf(err) != KindValue || !strings.Contains(err.Error(), "Invalid schedule") {
		t.Fatalf("invalid schedule: %v", err)
	}
	if _, err := a.LookupOrClaim(ctx, "blur", src, sched, ClaimOptions{Lease: time.Millisecond}); KindOf(err) != KindValue {
		t.Fatalf("short lease: %v", err)
	}
	scheds := []string{sched, "U(L2,4,comps=['c1'])", "R(L0,comps=['c1'])"}
	if _, err := a.LookupManyOrClaim(ctx, "blur", src, append(scheds, "X"), ClaimOptions{}); err == nil || !strings.HasPrefix(err.Error(), "schedules[3]: ") {
		t.Fatalf("batch validation: %v", err)
	}
	if ok, _ := a.Record(ctx, "blur", src, Measurement{Schedule: scheds[2], IsLegal: false}, false); !ok {
		t.Fatal("record")
	}
	out, err := a.LookupManyOrClaim(ctx, "blur", src, scheds[:2], ClaimOptions{})
	if err != nil || out[0].Claim == nil || out[1].Claim == nil {
		t.Fatalf("batch: %+v %v", out, err)
	}
	mixed, err := b.LookupManyOrClaim(ctx, "blur", src, scheds, ClaimOptions{})
	if err != nil || mixed[0].Busy == nil || mixed[1].Busy == nil || mixed[2].Result == nil {
		t.Fatalf("mixed: %+v %v", mixed, err)
	}
	// Closing the holder releases its claims: the other store gets them.
	a.Close()
	again, err := b.LookupManyOrClaim(ctx, "blur", src, scheds, ClaimOptions{})
	if err != nil || again[0].Claim == nil || again[1].Claim == nil {
		t.Fatalf("after close: %+v %v", again, err)
	}
}

// TestSameScheduleTwiceInABatch: one claim serves both entries.
func TestSameScheduleTwiceInABatch(t *testing.T) {
	t.Parallel()
	a, _ := twoStores(t)
	out, err := a.LookupManyOrClaim(ctx, "blur", src, []string{sched, " " + sched}, ClaimOptions{})
	if err != nil || out[0].Claim == nil || out[0].Claim != out[1].Claim {
		t.Fatalf("%+v %v", out, err)
	}
	if cl, _ := a.Claims(ctx); len(cl) != 1 {
		t.Fatalf("claims: %+v", cl)
	}
	if ok, err := out[1].Claim.Record(ctx, measured); !ok || err != nil {
		t.Fatal(ok, err)
	}
}

// commitAnswerLost is a backend whose UpdateClaims commits fn's
// transaction and then, as a database server's backend does when the
// answer of that COMMIT was lost, runs fn again in a new one (the
// storage.Backend.UpdateClaims contract), lost times.
type commitAnswerLost struct {
	storage.Backend
	lost int
}

func (b *commitAnswerLost) UpdateClaims(ctx context.Context, op string, fn func(storage.ClaimWriter) error) error {
	if err := b.Backend.UpdateClaims(ctx, op, fn); err != nil || b.lost == 0 {
		return err
	}
	b.lost--
	return b.Backend.UpdateClaims(ctx, op, fn)
}

// TestClaimKnownAsOwnAfterALostCommit: a claim pass run again after its
// COMMIT's answer was lost finds its claim by its token and returns it;
// exactly one claim row is left, the caller's, which its record ends.
// Negative control: with a new token per pass, the pass run again takes
// its own earlier claim for another live worker's and answers busy.
func TestClaimKnownAsOwnAfterALostCommit(t *testing.T) {
	for _, control := range []bool{false, true} {
		a, _ := twoStores(t)
		a.be = &commitAnswerLost{Backend: a.be, lost: 1}
		freshTokenPerPass = control
		o, err := a.LookupOrClaim(ctx, "blur", src, sched, ClaimOptions{})
		freshTokenPerPass = false
		if err != nil {
			t.Fatal(err)
		}
		if control {
			if o.Busy == nil || o.Busy.PID != os.Getpid() {
				t.Fatalf("negative control: %+v", o)
			}
			continue
		}
		if o.Claim == nil {
			t.Fatalf("not claimed after the pass ran again: %+v", o)
		}
		var rows map[string]*storage.Claim
		err = a.be.View(ctx, "claims", func(r storage.Reader) (err error) {
			rows, err = r.GetClaims([]string{o.Claim.Key()})
			return err
		})
		if cl, err2 := a.Claims(ctx); err != nil || err2 != nil || len(cl) != 1 || rows[o.Claim.Key()] == nil ||
			rows[o.Claim.Key()].Token != o.Claim.Token() {
			t.Fatalf("claims: %+v %+v %v %v", cl, rows, err, err2)
		}
		if wrote, err := o.Claim.Record(ctx, measured); !wrote || err != nil {
			t.Fatalf("record: %v %v", wrote, err)
		}
		if cl, err := a.Claims(ctx); err != nil || len(cl) != 0 {
			t.Fatalf("claims left: %+v %v", cl, err)
		}
	}
}

// TestStaleClaimsRemovedReportedAfterALostCommit: a removal of stale
// claims run again after its COMMIT's answer was lost finds nothing left
// to remove, and still reports the claim that the first run removed.
func TestStaleClaimsRemovedReportedAfterALostCommit(t *testing.T) {
	t.Parallel()
	a, _ := twoStores(t)
	dead := plantDeadHolder(t, a)
	a.be = &commitAnswerLost{Backend: a.be, lost: 1}
	got, err := a.StaleClaims(ctx, true)
	if err != nil || len(got) != 1 || got[0].PID != dead {
		t.Fatalf("reported: %+v %v", got, err)
	}
	if cl, err := a.Claims(ctx); err != nil || len(cl) != 0 {
		t.Fatalf("claims left: %+v %v", cl, err)
	}
}
