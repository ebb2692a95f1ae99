package core

import (
	"context"
	"time"

	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// # Renewing the claims a store holds
//
// A holder renews its claims while it holds them (see "Claims" in
// claim.go): one goroutine per Store, started by the first claim it
// holds and ended when it holds none or closes, renews them all in one
// transaction every third of the shortest lease. A renewal that finds a
// claim's token gone marks the claim taken over; at Close the claims still
// held are released, so that their waiters need not wait out the leases.

// hold starts renewing c.
func (cs *claimState) hold(s *Store, c *Claim) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.held == nil {
		cs.held = make(map[string]*Claim)
	}
	cs.held[c.ref.Token] = c
	delete(cs.seen, c.ref.Key)
	if cs.closed {
		return
	}
	if !cs.renewing {
		cs.renewing = true
		cs.wake, cs.stop = make(chan struct{}, 1), make(chan struct{})
		go cs.renew(s, cs.wake, cs.stop)
		return
	}
	select {
	case cs.wake <- struct{}{}:
	default:
	}
}

// drop stops renewing c.
func (cs *claimState) drop(c *Claim) {
	cs.mu.Lock()
	delete(cs.held, c.ref.Token)
	cs.mu.Unlock()
}

// renewInterval is a third of the shortest lease held, and whether any
// claim is held (the caller holds cs.mu).
func (cs *claimState) renewInterval() (time.Duration, bool) {
	var every time.Duration
	for _, c := range cs.held {
		if !c.takenOver() && (every == 0 || c.lease/3 < every) {
			every = c.lease / 3
		}
	}
	return every, every > 0
}

// renew is the renewer goroutine: while the store holds claims it renews
// them all, in one transaction, every third of the shortest lease; a
// claim whose token is gone is marked taken over (and still renewed
// nowhere). It ends when no claim is held or at Close.
func (cs *claimState) renew(s *Store, wake <-chan struct{}, stop <-chan struct{}) {
	last := time.Now()
	for {
		cs.mu.Lock()
		every, any := cs.renewInterval()
		if !any {
			cs.renewing = false
			cs.mu.Unlock()
			return
		}
		cs.mu.Unlock()
		t := time.NewTimer(time.Until(last.Add(every)))
		select {
		case <-stop:
			t.Stop()
			return
		case <-wake:
			t.Stop()
			continue // the shortest lease may have changed
		case <-t.C:
		}
		last = time.Now()
		refs := cs.renewable("")
		// A renewal may wait for the lock for two thirds of the lease: a
		// waiter expires the claim a lease after it last saw the row
		// change, so a late renewal still counts; one that failed is
		// tried again soon rather than at the next tick.
		ctx, cancel := context.WithTimeout(context.Background(), 2*every)
		go func() {
			select {
			case <-stop:
			case <-ctx.Done():
			}
			cancel()
		}()
		var renewed []storage.ClaimRef
		err := s.be.UpdateClaims(ctx, "renew claims", func(w storage.ClaimWriter) (err error) {
			renewed, err = w.RenewClaims(refs, identity.NowISO(time.Now()))
			return err
		})
		cancel()
		if err != nil {
			last = time.Now().Add(tuning.ClaimMinPoll - every)
			continue
		}
		cs.renewed(refs, renewed)
	}
}

// renewable is the claims to renew now, but the one named except: those
// held and not taken over.
func (cs *claimState) renewable(except string) []storage.ClaimRef {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	var refs []storage.ClaimRef
	for tok, c := range cs.held {
		if tok != except && !c.takenOver() {
			refs = append(refs, c.ref)
		}
	}
	return refs
}

// renewed notes the outcome of a renewal of refs: a claim not among
// renewed was taken over (or removed).
func (cs *claimState) renewed(refs, renewed []storage.ClaimRef) {
	ok := make(map[string]bool, len(renewed))
	for _, r := range renewed {
		ok[r.Token] = true
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, r := range refs {
		if c := cs.held[r.Token]; c != nil && !ok[r.Token] {
			c.mu.Lock()
			c.taken = true // kept for a late Record, renewed no more
			c.mu.Unlock()
		}
	}
}

// close stops the renewer and returns the claims still held (Close
// releases them).
func (cs *claimState) close() []*Claim {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.closed = true
	if cs.renewing {
		close(cs.stop)
		cs.renewing = false
	}
	out := make([]*Claim, 0, len(cs.held))
	for _, c := range cs.held {
		out = append(out, c)
	}
	return out
}

// releaseHeld releases, in one transaction, the claims the store still
// holds when it closes, so that waiters need not wait out their leases.
func (s *Store) releaseHeld(ctx context.Context) {
	held := s.claims.close()
	if len(held) == 0 {
		return
	}
	_ = s.be.UpdateClaims(ctx, "release claims", func(w storage.ClaimWriter) error {
		for _, c := range held {
			if _, err := w.DeleteClaim(c.ref.Key, c.ref.Token); err != nil {
				return err
			}
		}
		return nil
	})
	for _, c := range held {
		c.mu.Lock()
		c.ended = true
		c.mu.Unlock()
	}
}
