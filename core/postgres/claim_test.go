package postgres_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/internal/pgtest"
	"github.com/tirastore/tirastore/core/postgres"
)

// claimRace has workers, each with a store (a pool) of its own, claim the
// same schedules at once, and returns how many claimed each schedule.
func claimRace(t *testing.T, url string, workers, schedules int) map[string]int {
	t.Helper()
	stores := make([]*core.Store, workers)
	for i := range stores {
		st, err := core.Open(ctx, url, core.Options{CPUModel: "X", SlurmCPUs: "N/A"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		stores[i] = st
	}
	var mu sync.Mutex
	claimed := map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, workers)
	for _, st := range stores {
		wg.Add(1)
		go func(st *core.Store) {
			defer wg.Done()
			<-start
			for i := 0; i < schedules; i++ {
				sched := fmt.Sprintf("U(L0,%d,comps=['c'])", i)
				out, err := st.LookupOrClaim(ctx, "race", "void race() {}", sched, core.ClaimOptions{Lease: time.Minute})
				if err != nil {
					errs <- err
					return
				}
				if out.Claim != nil {
					mu.Lock()
					claimed[sched]++
					mu.Unlock()
				}
			}
		}(st)
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return claimed
}

// Claimers of one key on the server are serialized on that key: of 8
// stores claiming the same 40 schedules at once, exactly one claims each.
// Negative control: without the claims transaction's key locks, two
// claimers read "no claim" at once and both write theirs.
func TestOneClaimerPerKey(t *testing.T) {
	claimed := claimRace(t, pgtest.URL(t), 8, 40)
	if len(claimed) != 40 {
		t.Fatalf("%d of 40 schedules claimed", len(claimed))
	}
	for sched, n := range claimed {
		if n != 1 {
			t.Errorf("%s claimed %d times", sched, n)
		}
	}
}

func TestNegativeControlWithoutKeyLocksTwoClaimSomeKey(t *testing.T) {
	restore := postgres.SkipKeyLocks()
	defer restore()
	for round := 0; round < 5; round++ {
		for _, n := range claimRace(t, pgtest.URL(t), 8, 40) {
			if n > 1 {
				return // the fault the test above guards against, caught
			}
		}
	}
	t.Fatal("without key locks no schedule was claimed twice in 5 rounds: the race test cannot tell")
}
