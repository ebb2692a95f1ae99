// Package postgres is the PostgreSQL backend of the storage seam
// (core/storage): one database on a server, shared by workers on several
// clusters, with row-level concurrency and no global lock.
//
// It keeps the tables and columns of the SQLite schema (db_meta,
// programs, records, config_entries, config_imports, claims; schema.go),
// so that SQL users can query either backend alike, with one column
// more: records.rowid, the insertion order SQLite keeps in its hidden
// rowid, which export's order needs for records of one creation date.
//
// How each operation reaches the server:
//   - lookup, lookup_many, contains, config get: one statement each, one
//     round trip; nothing is cached in the process (every answer is the
//     server's; tests/bench measures what a cache could save);
//   - record, record_many: one pipelined batch, one round trip: the
//     program and every row as one INSERT ... ON CONFLICT DO NOTHING
//     (or DO UPDATE with overwrite) from arrays, the claims it ends and
//     renews, all in the batch's one implicit transaction;
//   - claims: rows of claims; a claims transaction first takes a
//     transaction-scoped advisory lock per key, so two claimers of one
//     key are serialized on that key only, and the server's clock dates
//     and expires the leases (storage.Claim.ServerClock);
//   - View is a REPEATABLE READ, read-only transaction (one snapshot),
//     Update a READ COMMITTED one.
//
// Connections follow libpq's conventions, through pgx: the URL
// (postgresql://user@host:port/db?sslmode=...), the PG* environment
// variables, ~/.pgpass and the service file. A password is never shown:
// Location and every error message leave it out.
//
// Faults: a lost connection or a restarting server is retried with
// backoff for up to tuning.ServerRetryFor when the call can be retried
// (nothing was sent, or it is idempotent: every read, and a record, whose
// retry recognizes its own rows); every statement has a server-side
// statement_timeout and a client-side deadline, and a connection attempt
// a connect timeout, so a cut network fails a call instead of hanging it.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/environ"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

// IsURL reports whether location, a server's URL (storage.IsServerURL
// decides that), is one this backend serves: postgresql:// or
// postgres://, as libpq accepts.
func IsURL(location string) bool {
	l := strings.ToLower(location)
	return strings.HasPrefix(l, "postgresql://") || strings.HasPrefix(l, "postgres://")
}

// Backend is an open PostgreSQL database: a pool of connections of this
// process. It is safe for concurrent use.
type Backend struct {
	pool *pgxpool.Pool
	loc  string   // the URL without its password
	hide []string // passwords to keep out of every message
	cfg  storage.Config
	// stmtTimeout is the client-side deadline of one statement.
	stmtTimeout time.Duration
	// host and port of the first server the URL names (probe).
	host string
	port uint16
	// mode is the URL's pool_mode (poolmode.go); local the settings that
	// transaction pooling makes in each transaction instead of at
	// connect, by name.
	mode  string
	local [][2]string

	// mu: operations hold it shared, Close exclusively, so that calls in
	// flight finish first.
	mu     sync.RWMutex
	closed bool
}

// Open connects to the database the URL names and, unless
// cfg.MustExist, creates the schema in it when it has none (the database
// itself must exist: creating one is the server administrator's job).
func Open(ctx context.Context, rawURL string, cfg storage.Config) (*Backend, *storage.Opened, error) {
	loc := Redact(rawURL)
	connURL, notices := withHomeFiles(rawURL)
	connURL, mode, err := splitPoolMode(connURL)
	if err != nil {
		return nil, nil, poolModeError(loc, err)
	}
	pc, err := pgxpool.ParseConfig(connURL)
	if err != nil {
		return nil, nil, apierr.Wrap(apierr.KindValue, err, "cannot use the database URL %s: %s", loc, scrub(err.Error(), passwordsOf(rawURL)))
	}
	s := &Backend{loc: loc, cfg: cfg, hide: passwordsOf(rawURL), mode: mode}
	if p := pc.ConnConfig.Password; p != "" {
		s.hide = append(s.hide, p)
	}
	if err := s.configure(pc, rawURL); err != nil {
		return nil, nil, poolModeError(loc, err)
	}
	s.host, s.port = pc.ConnConfig.Host, pc.ConnConfig.Port
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return nil, nil, s.classify(err, "connect to")
	}
	s.pool = pool
	opened, err := s.init(ctx)
	if err != nil {
		s.closePool() // bounded: the server may be the reason
		return nil, nil, err
	}
	opened.Notices = append(notices, opened.Notices...)
	return s, opened, nil
}

// withHomeFiles is the URL with libpq's choice of its files made
// explicit, where the URL and the environment leave them unset: the files
// libpq looks for in the home directory are found through $HOME first, as
// libpq does (pgx alone would take the user database's home directory).
//   - the password file: PGPASSFILE, else $HOME/.pgpass; none when it has
//     group or world access (libpq ignores it then, and so does this,
//     with a notice saying so);
//   - the service file: PGSERVICEFILE, else $HOME/.pg_service.conf;
//   - the TLS files of $HOME/.postgresql: root.crt (sslrootcert), and
//     postgresql.crt with postgresql.key (sslcert, sslkey), when present.
func withHomeFiles(rawURL string) (string, []string) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL, nil
	}
	home := environ.Get("HOME")
	if home == "" {
		if h, err := os.UserHomeDir(); err == nil {
			home = h
		}
	}
	q := u.Query()
	unset := func(param, env string) bool { return !q.Has(param) && environ.Get(env) == "" }
	exists := func(path string) bool { fi, err := os.Stat(path); return err == nil && fi.Mode().IsRegular() }
	var notices []string
	if !q.Has("passfile") {
		path := environ.Get("PGPASSFILE")
		if path == "" && home != "" {
			path = filepath.Join(home, ".pgpass")
		}
		if path != "" {
			fi, err := os.Stat(path)
			switch {
			case err != nil:
				path = "" // none: nothing to read
			case !fi.Mode().IsRegular():
				notices = append(notices, fmt.Sprintf("password file %s is not a plain file: ignored", path))
				path = ""
			case fi.Mode().Perm()&0o077 != 0:
				notices = append(notices, fmt.Sprintf("password file %s has group or world access: ignored, "+
					"as libpq does (chmod 0600 %s)", path, path))
				path = ""
			}
			q.Set("passfile", path)
		}
	}
	if home != "" {
		if f := filepath.Join(home, ".pg_service.conf"); unset("servicefile", "PGSERVICEFILE") && exists(f) {
			q.Set("servicefile", f)
		}
		dir := filepath.Join(home, ".postgresql")
		if f := filepath.Join(dir, "root.crt"); unset("sslrootcert", "PGSSLROOTCERT") && exists(f) {
			q.Set("sslrootcert", f)
		}
		crt, key := filepath.Join(dir, "postgresql.crt"), filepath.Join(dir, "postgresql.key")
		if unset("sslcert", "PGSSLCERT") && unset("sslkey", "PGSSLKEY") && exists(crt) && exists(key) {
			q.Set("sslcert", crt)
			q.Set("sslkey", key)
		}
	}
	u.RawQuery = q.Encode()
	return u.String(), notices
}

// configure applies the engine's defaults to what the URL and the
// environment left unset: the connect timeout, the pool's size, and the
// server's timeouts for this engine's sessions (or, for transaction
// pooling, for each transaction: pooled).
func (s *Backend) configure(pc *pgxpool.Config, rawURL string) error {
	cc := pc.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = tuning.ServerConnectTimeout
	}
	if !hasQueryParam(rawURL, "pool_max_conns") {
		pc.MaxConns = tuning.ServerMaxConns
	}
	pc.MinConns = 0
	pc.MaxConnIdleTime = time.Minute
	params := cc.RuntimeParams
	if params == nil {
		params = map[string]string{}
		cc.RuntimeParams = params
	}
	if params["application_name"] == "" {
		params["application_name"] = "tirastore"
	}
	stmt := tuning.ServerStatementTimeout
	set := func(name, value string) {
		if _, ok := params[name]; !ok && !strings.Contains(params["options"], name) {
			params[name] = value
		}
	}
	// The user's statement_timeout, in a parameter or in options, also
	// sets the client-side deadline.
	if v, ok := optionValue(params["options"], "statement_timeout"); ok {
		if _, set := params["statement_timeout"]; !set {
			params["statement_timeout"] = v
		}
	}
	set("statement_timeout", fmt.Sprint(stmt.Milliseconds()))
	set("idle_in_transaction_session_timeout", fmt.Sprint(tuning.ServerIdleInTransaction.Milliseconds()))
	switch lt := s.cfg.LockTimeout; {
	case lt == storage.TryOnce:
		set("lock_timeout", "1")
	case lt > 0:
		set("lock_timeout", fmt.Sprint(max(lt.Milliseconds(), 1)))
	}
	if v, ok := params["statement_timeout"]; ok {
		if d, ok := pgDuration(v); ok {
			stmt = d // 0: the user's choice, no bound
		}
	}
	s.stmtTimeout = 0
	if stmt > 0 {
		s.stmtTimeout = stmt + tuning.ServerCallSlack
	}
	if s.mode == poolTransaction {
		return s.pooled(pc, rawURL)
	}
	return nil
}

// pgDuration reads a time setting as the server does: a number of
// milliseconds, or a number with a unit (us, ms, s, min, h, d).
func pgDuration(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	i := strings.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := v, "ms"
	if i >= 0 {
		num, unit = v[:i], strings.TrimSpace(v[i:])
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0, false
	}
	per := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second,
		"min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[unit]
	if per == 0 {
		return 0, false
	}
	return time.Duration(f * float64(per)), true
}

// optionValue finds "-c name=value" (or "-cname=value", "--name=value")
// in a libpq options string.
func optionValue(options, name string) (string, bool) {
	for _, w := range optionWords(options) {
		if k, v, ok := strings.Cut(w.text, "="); w.setting && ok && strings.ReplaceAll(k, "-", "_") == name {
			return v, true
		}
	}
	return "", false
}

// optionWord is a word of a libpq options string: the name=value of a
// setting switch ("-c name=value", "-cname=value", "--name=value";
// setting true), or another word as written.
type optionWord struct {
	text    string
	setting bool
}

// optionWords splits a libpq options string into its words, what
// optionValue and optionSettings (poolmode.go) read.
func optionWords(options string) []optionWord {
	var out []optionWord
	f := strings.Fields(options)
	for i := 0; i < len(f); i++ {
		o := f[i]
		switch {
		case o == "-c" && i+1 < len(f):
			i++
			out = append(out, optionWord{f[i], true})
		case strings.HasPrefix(o, "--"), strings.HasPrefix(o, "-c"):
			out = append(out, optionWord{o[2:], true})
		default:
			out = append(out, optionWord{o, false})
		}
	}
	return out
}

// Location is the URL without its password.
func (s *Backend) Location() string { return s.loc }

// DatabaseName is the name of the database on the server (storage.OnServer):
// a backup of it is a file of that name.
func (s *Backend) DatabaseName() string { return DatabaseName(s.loc) }

// Close waits for the calls in flight, then closes the pool.
func (s *Backend) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closePool()
	return nil
}

// CloseIfIdle is Close unless a call is in flight.
func (s *Backend) CloseIfIdle() (bool, error) {
	if !s.mu.TryLock() {
		return false, nil
	}
	defer s.mu.Unlock()
	s.closePool()
	return true, nil
}

// closePool closes the pool, waiting at most tuning.ServerCloseWait: a
// connection that timed out is closed by pgx with a cancel request to the
// server, which an unreachable server never answers, and closing a store
// (at exit, say) must not hang on it. The rest goes on in the background.
func (s *Backend) closePool() {
	if s.closed {
		return
	}
	s.closed = true
	done := make(chan struct{})
	go func() {
		s.pool.Close()
		close(done)
	}()
	t := time.NewTimer(tuning.ServerCloseWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// enter starts an operation: ErrClosed after Close; the returned context
// is ctx made interruptible (Ctrl-C) when the caller asked for it, and
// done ends the operation.
func (s *Backend) enter(ctx context.Context) (context.Context, func(), error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, nil, apierr.ErrClosed
	}
	stop := func() {}
	if s.cfg.Interruptible != nil {
		ctx, stop = s.cfg.Interruptible(ctx)
	}
	return ctx, func() { stop(); s.mu.RUnlock() }, nil
}

// stmtCtx is the context of one statement: ctx with the client-side
// deadline.
func (s *Backend) stmtCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.stmtTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.stmtTimeout)
}

// Redact is the URL without its password (in the user part or a password
// query parameter), for messages and Location.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		// Not parseable: keep the scheme and host part only.
		scheme, rest, _ := strings.Cut(rawURL, "://")
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			rest = rest[at+1:]
		}
		return scheme + "://" + rest
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.User(u.User.Username())
		}
	}
	q := u.Query()
	changed := false
	for _, k := range []string{"password", "sslpassword"} {
		if q.Has(k) {
			q.Del(k)
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// DatabaseName is the database a URL names ("tirastore" when it names
// none), for the names of files made from it (a backup's).
func DatabaseName(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil {
		if n := strings.Trim(u.Path, "/"); n != "" && !strings.ContainsAny(n, "/\x00") {
			return n
		}
		if n := u.Query().Get("dbname"); n != "" && !strings.ContainsAny(n, "/\x00") {
			return n
		}
	}
	return "tirastore"
}

// passwordsOf lists the passwords written in rawURL.
func passwordsOf(rawURL string) []string {
	var out []string
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil
	}
	if u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			out = append(out, p, url.PathEscape(p), url.QueryEscape(p))
		}
	}
	for _, k := range []string{"password", "sslpassword"} {
		if p := u.Query().Get(k); p != "" {
			out = append(out, p, url.QueryEscape(p))
		}
	}
	return out
}

// scrub replaces every password of hide in msg.
func scrub(msg string, hide []string) string {
	for _, p := range hide {
		if len(p) >= 1 {
			msg = strings.ReplaceAll(msg, p, "********")
		}
	}
	return msg
}

// hasQueryParam reports whether the URL sets the query parameter name.
func hasQueryParam(rawURL, name string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && u.Query().Has(name)
}

// errNotPostgres marks a server that does not speak PostgreSQL as this
// backend needs it.
var errNotPostgres = errors.New("not a PostgreSQL server")
