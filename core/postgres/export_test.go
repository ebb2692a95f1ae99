package postgres

import (
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tirastore/tirastore/core/storage"
)

// ClientDeadline is the client-side deadline of a statement that a URL
// with these options gets.
func ClientDeadline(t *testing.T, options string) time.Duration {
	u := "postgresql://u@h/db"
	if options != "" {
		u += "?options=" + url.QueryEscape(options)
	}
	pc, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{cfg: storage.Config{}}
	s.configure(pc, u)
	return s.stmtTimeout
}

// SkipKeyLocks switches the claims transaction's key locks off (the
// negative control of the claim race test) until the returned function
// runs.
func SkipKeyLocks() func() {
	skipKeyLocks = true
	return func() { skipKeyLocks = false }
}
