package postgres

import (
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tirastore/tirastore/core/apierr"
)

// Behind a connection pooler in transaction pooling mode (PgBouncer's
// pool_mode = transaction), each transaction of a client may run on
// another server connection: nothing a session sets may outlive its
// transaction. The URL's pool_mode parameter says which mode the
// connections meet (poolModeParam); pgx never sees it.
//
//   - session (the default): a server directly, or a pooler in session
//     mode that passes startup parameters on. The engine's settings
//     (statement_timeout, idle_in_transaction_session_timeout,
//     lock_timeout) go in the startup packet, and pgx caches prepared
//     statements per connection (its default query mode).
//   - transaction: no startup parameter but application_name and those
//     PgBouncer tracks itself; the settings are made with SET LOCAL at the
//     start of every transaction and with set_config(..., true) at the
//     head of every write's batch, so that they end with it; the query
//     mode is pgx's cache_describe (unnamed statements, parsed in the
//     transaction that runs them), unless the URL's own
//     default_query_exec_mode says otherwise (cache_statement needs
//     PgBouncer >= 1.21 with max_prepared_statements > 0). Locks were
//     transaction-scoped already (pg_advisory_xact_lock), and nothing
//     LISTENs.
//   - statement is refused: the claims, the schema's creation, View's
//     snapshot and every write's batch are transactions of several
//     statements, which statement pooling forbids.

// poolModeParam is the URL query parameter that names the pooling mode.
const poolModeParam = "pool_mode"

// Pooling modes of the URL's pool_mode.
const (
	poolSession     = "session"
	poolTransaction = "transaction"
)

// localSettings are the server settings that the engine (or the URL)
// sets and that transaction pooling moves into each transaction: all of
// them bound how long something may take, so that a statement outside a
// transaction (a lookup: one statement, bounded by its client-side
// deadline) may run without them. Other settings change what a statement
// means (search_path, say) and would have to reach every statement: in
// transaction mode they are refused, to be set on the role or database
// (ALTER ROLE ... SET) instead.
var localSettings = map[string]bool{
	"statement_timeout":                   true,
	"idle_in_transaction_session_timeout": true,
	"lock_timeout":                        true,
}

// pooledStartupParams are the startup parameters that PgBouncer accepts
// from a client and keeps per client itself (it refuses others, unless
// told to ignore them, which would drop them silently).
var pooledStartupParams = map[string]bool{
	"application_name": true, "client_encoding": true, "datestyle": true, "timezone": true,
	"standard_conforming_strings": true,
}

// splitPoolMode removes pool_mode from the URL and returns the mode
// (poolSession when the URL names none).
func splitPoolMode(rawURL string) (string, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL, poolSession, nil // pgx's parser reports it
	}
	q := u.Query()
	if !q.Has(poolModeParam) {
		return rawURL, poolSession, nil
	}
	given := q.Get(poolModeParam)
	mode := strings.ToLower(given)
	q.Del(poolModeParam)
	u.RawQuery = q.Encode()
	switch mode {
	case poolSession, poolTransaction:
		return u.String(), mode, nil
	case "statement":
		return "", "", fmt.Errorf("pool_mode=statement cannot work: TiraStore's claims, schema creation, " +
			"consistent reads and writes are transactions of several statements, which statement pooling forbids; " +
			"configure the pooler's pool_mode = transaction and use pool_mode=transaction in the URL")
	}
	return "", "", fmt.Errorf("pool_mode=%q: expected session (a server, or a pooler in session mode) or "+
		"transaction (PgBouncer's pool_mode = transaction)", given)
}

// pooled moves what a session would keep out of the connections'
// startup (configure has set the engine's defaults) for transaction
// pooling: the local settings into s.local, the query mode to
// cache_describe unless the URL chose one. Other startup settings are
// refused with what to do instead.
func (s *Backend) pooled(pc *pgxpool.Config, rawURL string) error {
	params := pc.ConnConfig.RuntimeParams
	set := map[string]string{}
	if opts := params["options"]; strings.TrimSpace(opts) != "" {
		pairs, err := optionSettings(opts)
		if err != nil {
			return err
		}
		for k, v := range pairs {
			set[k] = v
		}
	}
	delete(params, "options")
	for k, v := range params {
		switch {
		case localSettings[k]:
			if _, fromOptions := set[k]; !fromOptions {
				set[k] = v
			}
			delete(params, k)
		case !pooledStartupParams[strings.ToLower(k)]:
			return fmt.Errorf("pool_mode=transaction: the URL's parameter %s would be a session setting, which "+
				"does not reach the server through a transaction pooler: set it on the role or database "+
				"(ALTER ROLE ... SET %s = ...) instead", k, k)
		}
	}
	for k := range set {
		if !localSettings[k] {
			return fmt.Errorf("pool_mode=transaction: the URL's options set %s, a session setting, which does "+
				"not reach the server through a transaction pooler: set it on the role or database "+
				"(ALTER ROLE ... SET %s = ...) instead; only statement_timeout, lock_timeout and "+
				"idle_in_transaction_session_timeout are made per transaction", k, k)
		}
	}
	s.local = s.local[:0]
	for k, v := range set {
		s.local = append(s.local, [2]string{k, v})
	}
	sort.Slice(s.local, func(i, j int) bool { return s.local[i][0] < s.local[j][0] })
	if !hasQueryParam(rawURL, "default_query_exec_mode") {
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	return nil
}

// optionSettings reads the -c settings of a libpq options string; other
// command-line switches are refused (transaction pooling cannot pass
// them).
func optionSettings(options string) (map[string]string, error) {
	out := map[string]string{}
	for _, w := range optionWords(options) {
		if !w.setting {
			return nil, fmt.Errorf("pool_mode=transaction: the URL's options %q hold %s, which a transaction "+
				"pooler cannot pass to the server", options, w.text)
		}
		k, v, ok := strings.Cut(w.text, "=")
		if !ok {
			return nil, fmt.Errorf("pool_mode=transaction: the URL's options %q: %q is not name=value", options, w.text)
		}
		out[strings.ReplaceAll(k, "-", "_")] = v
	}
	return out, nil
}

// txOptions is opts with the local settings made at its BEGIN, in the
// same round trip (a simple-protocol query of several statements).
func (s *Backend) txOptions(opts pgx.TxOptions) pgx.TxOptions {
	if len(s.local) == 0 {
		return opts
	}
	var b strings.Builder
	b.WriteString("BEGIN")
	if opts.IsoLevel != "" {
		b.WriteString(" ISOLATION LEVEL " + strings.ToUpper(string(opts.IsoLevel)))
	}
	if opts.AccessMode != "" {
		b.WriteString(" " + strings.ToUpper(string(opts.AccessMode)))
	}
	for _, kv := range s.local {
		fmt.Fprintf(&b, "; SET LOCAL %s = %s", kv[0], quoteLiteral(kv[1]))
	}
	opts.BeginQuery = b.String()
	return opts
}

// queueLocal queues the local settings at the head of a write's batch
// (one implicit transaction: they end with it).
func (s *Backend) queueLocal(b *pgx.Batch) bool {
	if len(s.local) == 0 {
		return false
	}
	parts := make([]string, len(s.local))
	args := make([]any, 0, 2*len(s.local))
	for i, kv := range s.local {
		parts[i] = fmt.Sprintf("set_config($%d, $%d, true)", 2*i+1, 2*i+2)
		args = append(args, kv[0], kv[1])
	}
	b.Queue("SELECT "+strings.Join(parts, ", "), args...)
	return true
}

// quoteLiteral is v as an SQL string literal.
func quoteLiteral(v string) string {
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}

// poolModeError is a bad pool_mode or a setting that transaction pooling
// cannot carry, as the error of Open.
func poolModeError(loc string, err error) error {
	return apierr.Wrap(apierr.KindValue, err, "cannot use the database URL %s: %s", loc, err.Error())
}
