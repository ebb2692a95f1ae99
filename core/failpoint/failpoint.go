// Package failpoint lets robustness tests stop the engine at named moments,
// as etcd's bbolt does: a test sets TIRASTORE_FAILPOINTS and the engine,
// built with -tags failpoints, kills itself (or sleeps, or panics) when it
// reaches a named point, e.g. between writing a record and committing it.
//
// In a normal build every call here compiles to nothing: Inject is an empty
// function and Enabled returns false, so the production library carries no
// test switches at all. build.sh failpoints builds the test variant into
// build/failpoints/libtirastore.so.
//
// TIRASTORE_FAILPOINTS is a ';'-separated list of name=action, where action
// is one of
//
//	kill          SIGKILL this process (a crash: no deferred cleanup runs)
//	kill@P        kill with probability P (0..1) each time the point is hit
//	exit          os.Exit(77) without cleanup
//	sleep(MS)     sleep MS milliseconds (widen a race window)
//	panic         panic (the C layer must turn it into an error)
//	stop          SIGSTOP this process, the first time the point is hit
//	              (a stall: the test sends SIGCONT)
//	on            a switch, read with Enabled (e.g. lock-disabled=on)
package failpoint

// The points the engine defines. Tests refer to them by these names.
const (
	// LockAcquired: the hard-link lock is held, SQLite not yet opened.
	LockAcquired = "lock-acquired"
	// DBOpened: SQLite is open under the lock, nothing read yet.
	DBOpened = "db-opened"
	// BeforeCommit: a write transaction has run its statements, not committed.
	BeforeCommit = "before-commit"
	// AfterCommit: the transaction committed, the connection is still open.
	AfterCommit = "after-commit"
	// BeforeRelease: the operation is done (its transaction committed or
	// rolled back), the lock is still held.
	BeforeRelease = "before-release"
	// LockDisabled is a switch, not a point: the engine skips the hard-link
	// lock entirely. Only the negative controls of the concurrency tests set
	// it, to show that those tests catch an unprotected database.
	LockDisabled = "lock-disabled"
	// InterruptDisabled is a switch: the C layer does not catch Ctrl-C
	// during lock waits (the negative control of the interrupt test).
	InterruptDisabled = "interrupt-disabled"
	// SQLiteExclusive is a switch: the kept connection runs in SQLite's
	// exclusive locking mode, in which it never rereads pages that another
	// process changed (the negative control of the revalidation tests).
	SQLiteExclusive = "sqlite-exclusive"
	// CacheTrust is a switch: lookups are served from the in-process cache
	// without comparing the database header (the negative control of the
	// cache tests).
	CacheTrust = "cache-trust"
	// FenceDisabled is a switch: connections are opened without a fence,
	// so a holder that stalled past stale_lock_timeout goes on writing
	// after its lock was broken (the negative control of the stall tests).
	FenceDisabled = "fence-disabled"
	// DBWrite is a point of the VFS (vfs.c, C code): a write of this
	// process to a database file, which SQLite makes after it has synced
	// the journal and before it deletes it (the commit). Only the action
	// stop is honoured there, at the first write, or at the Nth with
	// "db-write=stop@N" (a database then half-written: N-1 pages of the
	// commit are in it).
	DBWrite = "db-write"
	// SharedDirTrust is a switch: the files of the database's directory
	// (the database, its journal, the lock, the break lock, lock tickets) are
	// opened as before the hardening, following links, blocking on a FIFO
	// and without their fstat checks, in Go (core/shareddir) and in the
	// VFS (the negative control of the planted-FIFO tests).
	SharedDirTrust = "shareddir-trust"
	// LinkTrust is a switch: paths are resolved following every symbolic
	// link, whoever owns it, as Python's resolve() does (the negative
	// control of the planted-link tests).
	LinkTrust = "link-trust"
	// JournalTrust is a switch: a journal found beside the database is
	// rolled back whoever wrote it (the negative control of the
	// planted-journal tests).
	JournalTrust = "journal-trust"
	// JournalModeCached is a switch of the VFS: a connection creates its
	// journals with the database's mode and owner as they were at its
	// first journal, not as they are now (the negative control of the
	// chmod tests: after a chmod of the database, a crashed writer's
	// journal is then refused as foreign).
	JournalModeCached = "journal-mode-cached"
	// OutputTrust is a switch: output paths (export, backup, export_json,
	// the CLI's conflicts file, plots) are written without the output
	// check of core/outfile, over the database, its lock or another
	// database if asked, and a database is made at the name of another's
	// lock file or journal (the negative controls of
	// tests/python/test_output_paths.py).
	OutputTrust = "output-trust"
	// ValueDepthUnlimited is a switch: the engine stores and returns JSON
	// values however deeply they nest (limits.MaxValueDepth is not
	// applied, neither by writes nor by reads), as before the limit: the
	// negative control of the depth tests of test_value_limits.py, whose
	// Python readers must then fail with RecursionError.
	ValueDepthUnlimited = "value-depth-unlimited"
	// TextSizeUnchecked is a switch: no text and no call is refused by
	// its size (limits.TextLimit and RequestLimit report no limit, to the
	// engine and to the bindings that ask), as before the limit: the
	// negative control of the size test of test_value_limits.py, whose
	// process must then die of Go's "out of memory" under an address-space
	// limit.
	TextSizeUnchecked = "text-size-unchecked"
	// ConfigRebuilding is a point in the rebuild of an old config table
	// into the namespaced layout (core/sqlite configs.go), inside the
	// first config write's transaction: the old table has been renamed
	// away and the new one does not exist yet. The crash test of
	// tests/python/test_config_methods.py kills a writer here and finds
	// the old table intact.
	ConfigRebuilding = "config-rebuilding"
	// ConfigRebuildApart is a switch: the rebuild of an old config table
	// commits each of its steps on its own instead of inside the write's
	// transaction (the negative control of that crash test, whose killed
	// writer then leaves neither table).
	ConfigRebuildApart = "config-rebuild-apart"
)
