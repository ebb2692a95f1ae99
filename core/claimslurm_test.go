package core

import (
	"context"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// A holder is asked about only when it is of this cluster, on another
// host, overdue (5/12 of its lease unchanged), and not asked about within
// tuning.SlurmInterval; once its job is known ended, its claim as it
// stood is takeable, and a renewal since makes it another claim.
func TestSlurmDue(t *testing.T) {
	t.Setenv("SLURM_CLUSTER_NAME", "c1")
	s := &Store{hostname: "here"}
	lease := 12 * time.Second
	now := time.Now()
	holder := func(cluster, job, host string) *pendingClaim {
		c := &storage.Claim{Key: "k", Token: "t", Hostname: host, SlurmJobID: job, SlurmCluster: cluster, LeaseSeconds: lease.Seconds()}
		return &pendingClaim{holder: c, due: now.Add(lease - 5*time.Second)} // unchanged for 5 s
	}
	for _, tc := range []struct {
		name string
		p    *pendingClaim
		due  bool
	}{
		{"overdue, of this cluster, on another host", holder("c1", "42", "node2"), true},
		{"another cluster", holder("c2", "42", "node2"), false},
		{"no cluster recorded", holder("", "42", "node2"), false},
		{"no job", holder("c1", "", "node2"), false},
	} {
		if got := s.slurmDue(tc.p, "c1", now); got != tc.due {
			t.Errorf("%s: slurmDue = %v, want %v", tc.name, got, tc.due)
		}
	}
	p := holder("c1", "42", "node2")
	if s.slurmDue(p, "c1", now.Add(-time.Second)) { // unchanged for 4 s < 5 s
		t.Error("asked about a holder whose renewal is not overdue yet")
	}
	p.slurmAsked = now.Add(-tuning.SlurmInterval / 2)
	if s.slurmDue(p, "c1", now) {
		t.Error("asked again within SlurmInterval")
	}
	if s.slurmDueAny(context.Background(), []*pendingClaim{holder("c1", "42", "node2")}, now) != true {
		t.Error("slurmDueAny missed an overdue holder")
	}
	c := p.holder
	s.claims.markJobEnded(c, "CANCELLED")
	if takeable, dead, _ := s.claims.look(s, c, now); !takeable || !dead {
		t.Fatalf("the claim of an ended job: takeable %v dead %v", takeable, dead)
	}
	renewed := *c
	renewed.Renewals++
	if takeable, _, _ := s.claims.look(s, &renewed, now); takeable {
		t.Fatal("a claim renewed after its job was seen ended is taken over")
	}
}
