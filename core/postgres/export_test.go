package postgres

import (
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	s := &Backend{cfg: storage.Config{}}
	if err := s.configure(pc, u); err != nil {
		t.Fatal(err)
	}
	return s.stmtTimeout
}

// SkipKeyLocks switches the claims transaction's key locks off (the
// negative control of the claim race test) until the returned function
// runs.
func SkipKeyLocks() func() {
	skipKeyLocks = true
	return func() { skipKeyLocks = false }
}

// SchemaSteps has fn told each opener's steps in creating the schema
// ("locked": it holds the schema lock; "create": it runs the DDL) and,
// with stale, has the check under the lock use the lookup that takes no
// lock (the negative control), until the returned function runs.
func SchemaSteps(fn func(step string), stale bool) func() {
	schemaStep, staleMetaCheck = fn, stale
	return func() { schemaStep, staleMetaCheck = nil, false }
}

// SchemaLock is the advisory lock key that serializes schema creation.
const SchemaLock = schemaLock

// BeginQuery is the BEGIN of a transaction of opts that a URL gets (""
// for pgx's own).
func BeginQuery(t *testing.T, rawURL string, opts pgx.TxOptions) string {
	connURL, mode, err := splitPoolMode(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := pgxpool.ParseConfig(connURL)
	if err != nil {
		t.Fatal(err)
	}
	s := &Backend{cfg: storage.Config{}, mode: mode}
	if err := s.configure(pc, rawURL); err != nil {
		t.Fatal(err)
	}
	return s.txOptions(opts).BeginQuery
}

// QueryOne runs a one-row query of one column in r's transaction.
func QueryOne(r storage.Reader, sql string, dst any) (bool, error) {
	return r.(*reader).row([]any{dst}, sql)
}
