package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/internal/wait"
	"github.com/tirastore/tirastore/core/tuning"
)

// classify turns an error of pgx or the server into an *apierr.Error
// that names the database (without its password) and the operation.
func (s *Backend) classify(err error, op string) error {
	if e, done := apierr.Classified(err); done {
		return e
	}
	msg := scrub(err.Error(), s.hide)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "28P01" || pe.Code == "28000":
			return apierr.Wrap(apierr.KindPermission, err, "%s: cannot %s: authentication failed: %s", s.loc, op, scrub(pe.Message, s.hide))
		case pe.Code == "42501":
			return apierr.Wrap(apierr.KindPermission, err, "%s: cannot %s: %s", s.loc, op, scrub(pe.Message, s.hide))
		case pe.Code == "3D000":
			return apierr.Wrap(apierr.KindNotFound, err, "%s: cannot %s: %s (the database must exist: "+
				"createdb, or CREATE DATABASE, by someone allowed to)", s.loc, op, scrub(pe.Message, s.hide))
		case pe.Code == "57014" || pe.Code == "55P03":
			return apierr.Wrap(apierr.KindTimeout, err, "%s: %s timed out on the server: %s", s.loc, op, scrub(pe.Message, s.hide))
		case strings.HasPrefix(pe.Code, "22") || pe.Code == "54000": // bad data, a value too large
			return apierr.Wrap(apierr.KindValue, err, "%s: cannot %s: %s", s.loc, op, scrub(pe.Message, s.hide))
		case pe.Code == "08P01" && strings.Contains(pe.Message, "unsupported startup parameter"):
			return apierr.Wrap(apierr.KindOperational, err, "%s: cannot %s: %s (a connection pooler such as PgBouncer "+
				"is in between: add pool_mode=transaction to the URL, which sends no session settings; docs/postgresql.md)",
				s.loc, op, scrub(pe.Message, s.hide))
		case pe.Code == "53300":
			return apierr.Wrap(apierr.KindOperational, err, "%s: cannot %s: %s (every connection slot of the server is "+
				"taken: raise max_connections, put PgBouncer in between, or lower pool_max_conns)", s.loc, op, scrub(pe.Message, s.hide))
		}
		return apierr.Wrap(apierr.KindOperational, err, "%s: cannot %s: %s (SQLSTATE %s)", s.loc, op, scrub(pe.Message, s.hide), pe.Code)
	}
	switch {
	case errors.Is(err, errNotPostgres):
		return apierr.Wrap(apierr.KindDatabase, err, "%s: cannot %s: %s", s.loc, op, msg)
	case errors.Is(err, context.Canceled):
		return apierr.Wrap(apierr.KindInterrupted, err, "%s: %s interrupted", s.loc, op)
	case errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err):
		return apierr.Wrap(apierr.KindTimeout, err, "%s: %s got no answer from the server in time: %s", s.loc, op, msg)
	case isProtocolError(err):
		return apierr.Wrap(apierr.KindDatabase, err, "%s: cannot %s: the server does not speak PostgreSQL's protocol: %s", s.loc, op, msg)
	case isConnError(err):
		return apierr.Wrap(apierr.KindOperational, err, "%s: cannot %s: the server is unreachable: %s", s.loc, op, msg)
	}
	return apierr.Wrap(apierr.KindOperational, err, "%s: cannot %s: %s", s.loc, op, msg)
}

// isProtocolError reports a peer that answered, but not in PostgreSQL's
// protocol (an HTTP server on the port, say).
func isProtocolError(err error) bool {
	m := err.Error()
	return strings.Contains(m, "unexpected message") || strings.Contains(m, "bad message") ||
		strings.Contains(m, "received unexpected") || strings.Contains(m, "invalid message") ||
		strings.Contains(m, "expected AuthenticationSASL") || strings.Contains(m, "unknown message type")
}

// isConnError reports a lost or refused connection, or a server that is
// shutting down or starting: what a retry may get past.
func isConnError(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "57P01", "57P02", "57P03", "08000", "08003", "08006", "08001", "08004":
			return true
		case "08P01":
			// A pooler's FATAL ends the client's connection when it lost
			// or cannot reach the server (PgBouncer: "server conn
			// crashed?", "pgbouncer cannot connect to server",
			// query_wait_timeout); not its refusal of a setting.
			return pe.Severity == "FATAL" && !strings.Contains(pe.Message, "unsupported startup parameter")
		}
		return false
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		// A Unix socket's listen queue is full (hundreds of clients
		// connecting at once to a pooler that just restarted).
		errors.Is(err, syscall.EAGAIN) ||
		errors.Is(err, syscall.ENOENT) || strings.Contains(err.Error(), "conn closed") ||
		strings.Contains(err.Error(), "closed pool")
}

// retriable reports an error after which the call may be tried again:
// a connection problem, or a serialization failure or deadlock that the
// server resolved by aborting this transaction.
func retriable(err error) bool {
	var ran ranErr
	if errors.As(err, &ran) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01") {
		return true
	}
	// A full listen queue (EAGAIN, which Go counts as a timeout) is
	// retried.
	if errors.Is(err, syscall.EAGAIN) {
		return true
	}
	// A timeout is the caller's bound (connect_timeout, the statement's
	// deadline), not a fault that a retry gets past.
	// A name that does not resolve is a typo or a configuration, not a
	// restart.
	var dns *net.DNSError
	if errors.Is(err, errNotPostgres) || isProtocolError(err) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.As(err, &dns) {
		return false
	}
	return isConnError(err)
}

// retry runs fn until it succeeds, fails for good, or tuning.ServerRetryFor
// has passed (retryFor: window): attempts after the first are told so
// (attempt > 0). An attempt that failed after sending something is retried
// only if idempotent (the caller's fn can be run again whatever the server
// did with an earlier attempt).
func (s *Backend) retry(ctx context.Context, op string, idempotent bool, fn func(ctx context.Context, attempt int) error) error {
	return s.retryFor(ctx, op, idempotent, func(error) time.Duration { return tuning.ServerRetryFor }, fn)
}

// retryFor is retry within window.
func (s *Backend) retryFor(ctx context.Context, op string, idempotent bool, window func(error) time.Duration, fn func(ctx context.Context, attempt int) error) error {
	start := time.Now()
	backoff := tuning.ServerRetryMin
	for attempt := 0; ; attempt++ {
		err := fn(ctx, attempt)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !retriable(err) || !(idempotent || pgconn.SafeToRetry(err)) {
			return s.classify(err, op)
		}
		if time.Since(start)+backoff > window(err) {
			e := s.classify(err, op)
			var ae *apierr.Error
			if errors.As(e, &ae) {
				ae.Message += " (tried " + strconv.Itoa(attempt+1) + " times over " + time.Since(start).Round(time.Millisecond).String() + ")"
			}
			return e
		}
		if werr := wait.Sleep(ctx, backoff); werr != nil {
			return s.classify(werr, op)
		}
		backoff = min(2*backoff, tuning.ServerRetryMax)
	}
}
