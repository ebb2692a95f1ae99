// Package operator holds the operator's tools, built on core.Store's
// exported methods and its storage seam (core.Store.Backend): the check
// of a database (check.go), the lock's status and break (lockadmin.go),
// the merge of another database (merge.go), and the original's export
// format, written and read back (exportformat.go). They are the C
// methods check, lock_status, lock_break, merge, export and import, which
// the `tirastore` command and the Python TiraStore call.
package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/postgres"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/sqlite"
	"github.com/tirastore/tirastore/core/sqlitefile"
	"github.com/tirastore/tirastore/core/storage"
)

// # Checking a database
//
// CheckDatabase is tirastore check: what an operator asks after a node
// died holding the lock or a filesystem misbehaved. It looks at the lock
// first (opening takes it, and would wait behind an abandoned one), then
// at the leftovers beside it, then opens the database and checks its
// tables under the lock. With repair it does what is safe: break an
// abandoned lock (the race-free way, never a live holder's) and remove
// the lock ticket files of dead processes; a damaged table is reported, never
// "repaired" (restore a backup, or export what is readable). A database
// on a PostgreSQL server has no lock: its check
// is the tables' (orphans, results that are not JSON; the server checks
// its own pages) and the stale measurement claims'.

// CheckReport is what CheckDatabase found and did.
type CheckReport struct {
	Path string
	// Problems are what the operator should know, one sentence each;
	// Repaired what repair did.
	Problems, Repaired []string
	Lock               *LockStatus
	Leftovers          []string // lock ticket files of dead processes, or provably old
	HotJournal         bool     // a crashed writer's journal was there (the check's read rolled it back)
	// ForeignJournal is what sits at the journal's name that the journal
	// rule refuses to roll back (core/sqlite: "The database's directory
	// is shared"); JournalMovedTo is where --repair moved it ("" if not).
	ForeignJournal    *sqlite.Journal
	JournalMovedTo    string
	SchemaVersion     string
	Tables            *storage.TableCheck
	Records, Programs int64
	// StaleClaims are measurement claims (lookup_or_claim) that nobody
	// will end: their holder died on this host or its Slurm job ended, or
	// their schedule is recorded; --repair removes them.
	StaleClaims []*core.ClaimHolder
	// Notices are the open's warnings (a directory other users cannot
	// use).
	Notices []string
}

// JournalChoice is what the operator chose for a journal that the journal
// rule refuses but that may be a crashed writer's (a hot regular file of
// one link): --repair never decides that alone, since the database may
// need it (its pages half-written) as much as it must never apply one
// that another user planted.
type JournalChoice int

const (
	// JournalReport leaves such a journal where it is and says what the
	// two choices below do.
	JournalReport JournalChoice = iota
	// JournalApply adopts it (sqlite.AdoptJournal): the database's owner
	// vetted it as a crashed writer's, and the check's own open rolls it
	// back.
	JournalApply
	// JournalDiscard moves it aside without applying it: it was planted.
	JournalDiscard
)

// CheckDatabase checks the database at path; see "Checking a database".
// opts' timeouts apply (a lock held by a live process makes the table
// checks wait for it, up to the lock timeout). journal is what to do with
// a refused journal that may be a crashed writer's.
func CheckDatabase(ctx context.Context, path string, opts core.Options, repair bool, journal JournalChoice) (*CheckReport, error) {
	if storage.IsServerURL(path) {
		// A server's database: no lock, no files of this node; the
		// tables and the claims as below.
		return checkTables(ctx, &CheckReport{Path: postgres.Redact(path)}, path, opts, repair)
	}
	l, abs, err := operatorLock(path, opts)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	rep := &CheckReport{}
	st, err := l.Inspect()
	if err != nil {
		return nil, lockReadError(err, l, abs)
	}
	rep.Lock = statusOf(st, abs, false, repairCmd)
	c := sqlitefile.LockCommandsFor(abs, st.StaleTimeout)
	// A lock that is not a record is never broken by waiters: the tables'
	// check would wait behind it as behind an abandoned one.
	stuck := st.Held && (rep.Lock.Abandoned() || st.Holder == nil)
	who := fmt.Sprintf("a file that is not a lock record, unchanged for %s", st.Age.Round(time.Second))
	if h := st.Holder; h != nil {
		who = fmt.Sprintf("held by %s pid %d", h.Hostname, h.PID)
	}
	switch {
	case rep.Lock.Abandoned() && repair:
		if bs, broken, err := l.Break(false); err != nil || !broken {
			msg := fmt.Sprintf("the lock %s looked abandoned (%s) but was not broken: %v", st.Path, who, err)
			if by := sqlitefile.RemovableBy(st.Path); by != "" {
				msg += fmt.Sprintf("; `%s`, run by %s, removes it", c.Repair, by)
			}
			rep.Problems = append(rep.Problems, msg)
		} else {
			rep.Lock = statusOf(bs, abs, true, repairCmd)
			rep.Repaired = append(rep.Repaired, fmt.Sprintf("broke the abandoned lock (%s)", who))
			stuck = false
		}
	case rep.Lock.Abandoned():
		rep.Problems = append(rep.Problems, fmt.Sprintf("the lock %s is abandoned (%s): %s", st.Path, who, rep.Lock.Advice))
	case stuck:
		rep.Problems = append(rep.Problems, fmt.Sprintf("the lock %s holds no lock record (%v); %s", st.Path, st.Unreadable, rep.Lock.Advice))
	}
	if repair {
		for _, p := range l.Sweep() {
			rep.Repaired = append(rep.Repaired, "removed the leftover lock ticket file "+p)
		}
	} else if rep.Leftovers = l.Leftovers(); len(rep.Leftovers) > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d leftover lock ticket files of dead processes beside the lock: `%s` removes them", len(rep.Leftovers), c.Repair))
	}
	if err := checkJournal(ctx, rep, l, abs, st.Held, repair, journal); err != nil {
		return nil, err
	}
	rep.Path = abs
	if stuck {
		// Taking the lock to read the tables would wait behind it (or
		// break it): only --repair may break it.
		rep.Problems = append(rep.Problems, "the tables were not checked: that takes the lock (they are once it is removed)")
		return rep, nil
	}
	return checkTables(ctx, rep, path, opts, repair)
}

// checkJournal judges what is at the database's journal name by the journal
// rule: a crashed writer's journal that the rule trusts is reported (the
// check's read rolls it back). One it refuses is foreign and never applied
// unless the operator says so (JournalApply). What cannot be a crashed
// writer's (not a regular file, a second name of another file, or a
// journal with nothing to roll back) repair moves aside, under the lock so
// that no live writer's journal is ever moved, to <journal>.foreign-<UTC
// time>; a hot journal that may be one is left in place (the database may
// be half-written without it) until the operator chooses.
func checkJournal(ctx context.Context, rep *CheckReport, l *sqlitefile.Lock, abs string, held, repair bool, choice JournalChoice) error {
	j, err := sqlite.InspectJournal(abs)
	if err != nil {
		return input.ReadError(err, "journal", sqlite.JournalPath(abs))
	}
	switch {
	case j == nil:
		if choice != JournalReport {
			rep.Problems = append(rep.Problems, fmt.Sprintf("there is no journal at %s to %s", sqlite.JournalPath(abs), choiceVerb(choice)))
		}
		return nil
	case j.Trusted():
		if j.Hot && !held {
			rep.HotJournal = true
			rep.Problems = append(rep.Problems, "a crashed writer's journal was beside the database (this check's read rolled its transaction back)")
		}
		return nil
	}
	rep.ForeignJournal = j
	q := sqlitefile.ShellQuote(abs)
	crashed := j.Hot && (j.Verdict == sqlite.JournalMode || j.Verdict == sqlite.JournalOwner)
	if choice == JournalApply && !crashed {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the journal %s cannot be applied: %s", j.Path, cannotApply(j)))
		return nil
	}
	if choice == JournalReport && crashed {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the journal %s holds a transaction to roll back, and the journal rule refuses it: %s. "+
			"If it is a crashed writer's (a worker that went on writing after the database was chmod'ed or chown'ed), "+
			"the database is half-written without it: once its owner has vetted it, `tirastore check --apply-journal %s` "+
			"rolls it back. If another user planted it, `tirastore check --discard-journal %s` moves it aside. "+
			"Until then it is left where it is, and the database cannot be used", j.Path, j.Why(), q, q))
		return nil
	}
	if !repair && choice == JournalReport {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the journal %s is foreign: %s; it is never rolled back, "+
			"and the database cannot be used while it is there; `%s` moves it aside", j.Path, j.Why(),
			sqlitefile.LockCommandsFor(abs, l.StaleTimeout()).Repair))
		return nil
	}
	aside := fmt.Sprintf("%s.foreign-%s", j.Path, time.Now().UTC().Format("20060102T150405.000000000Z"))
	if err := l.Acquire(ctx); err != nil {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the journal %s is foreign (%s) and was not %s: "+
			"cannot take the lock: %v", j.Path, j.Why(), choiceDone(choice), err))
		return nil
	}
	// Moved (or applied) as the very file judged: a name changed since is
	// left alone.
	now, err := sqlite.InspectJournal(abs)
	switch {
	case err != nil:
	case now == nil || now.Dev != j.Dev || now.Ino != j.Ino || now.Verdict != j.Verdict || now.Size != j.Size:
		err = fmt.Errorf("it changed while the lock was taken")
	case choice == JournalApply:
		err = sqlite.AdoptJournal(abs, j, aside)
	default:
		err = os.Rename(j.Path, aside)
	}
	if rerr := l.Release(); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the journal %s is foreign (%s) and could not be %s: %v "+
			"(its owner or root must remove it)", j.Path, j.Why(), choiceDone(choice), err))
		return nil
	}
	rep.JournalMovedTo = aside
	if choice == JournalApply {
		rep.Repaired = append(rep.Repaired, fmt.Sprintf("applied the journal %s (%s), as you vetted it: a trusted copy "+
			"was rolled back by this check's open; the file itself is kept at %s", j.Path, j.Why(), aside))
		return nil
	}
	rep.Repaired = append(rep.Repaired, fmt.Sprintf("moved the foreign journal %s aside to %s, without applying it (%s)", j.Path, aside, j.Why()))
	return nil
}

// cannotApply says why the refused journal j is not one that a crashed
// writer left.
func cannotApply(j *sqlite.Journal) string {
	if !j.Hot && j.Verdict != sqlite.JournalNotRegular && j.Verdict != sqlite.JournalLinks {
		return "it holds no transaction to roll back (`tirastore check --repair` moves it aside)"
	}
	return j.Why() + " (`tirastore check --repair` moves it aside)"
}

// choiceVerb and choiceDone name what choice does to a journal.
func choiceVerb(choice JournalChoice) string {
	if choice == JournalApply {
		return "apply"
	}
	return "discard"
}

func choiceDone(choice JournalChoice) string {
	if choice == JournalApply {
		return "applied"
	}
	return "moved aside"
}

// checkTables opens the database and adds what its tables and claims
// show to rep.
func checkTables(ctx context.Context, rep *CheckReport, path string, opts core.Options, repair bool) (*CheckReport, error) {
	opts.MustExist, opts.AllowCPUMismatch = true, true
	s, err := core.Open(ctx, path, opts)
	if err != nil {
		if core.KindOf(err) == core.KindDatabase || core.KindOf(err) == core.KindOperational {
			rep.Problems = append(rep.Problems, fmt.Sprintf("the database cannot be opened (integrity unknown): %v", err))
			return rep, nil
		}
		return nil, err
	}
	defer s.Close()
	rep, err = checkOpen(ctx, rep, s, repair)
	if err == nil {
		recordCheck(ctx, s, rep)
	}
	return rep, err
}

// CheckSummary is what a check leaves in the database's db_meta
// (storage.LastCheckKey) for the dashboard: when, where and by whom it
// ran, whether it found problems, the first of them.
type CheckSummary struct {
	Date     string   `json:"date"`
	Hostname string   `json:"hostname"`
	Username string   `json:"username"`
	OK       bool     `json:"ok"`
	Problems int      `json:"problems"`
	First    []string `json:"first_problems"`
	Repaired int      `json:"repaired"`
	Records  int64    `json:"records"`
}

// checkSummaryProblems bounds the problems a summary quotes.
const checkSummaryProblems = 3

// recordCheck writes rep's summary into the database it checked, in one
// small transaction. A database this user may not write (another user's
// file opened read-only) keeps its previous summary: a notice says so,
// and the check's outcome is not changed by it.
func recordCheck(ctx context.Context, s *core.Store, rep *CheckReport) {
	sum := CheckSummary{Date: identity.NowISO(time.Now()), Hostname: identity.Hostname(), Username: identity.Username(),
		OK: len(rep.Problems) == 0, Problems: len(rep.Problems), First: rep.Problems[:min(len(rep.Problems), checkSummaryProblems)],
		Repaired: len(rep.Repaired), Records: rep.Records}
	if sum.First == nil {
		sum.First = []string{}
	}
	b, err := json.Marshal(sum)
	if err == nil {
		err = s.Backend().Update(ctx, "check summary", func(w storage.Writer) error {
			return w.PutMeta(storage.LastCheckKey, string(b))
		})
	}
	if err != nil {
		rep.Notices = append(rep.Notices, fmt.Sprintf("this check's summary was not recorded in the database (the dashboard shows the previous one): %v", err))
	}
}

// LastCheck is the summary the last check left in the database, or nil
// when none did (or it is not readable: a newer engine's form).
func LastCheck(ctx context.Context, s *core.Store) (*CheckSummary, error) {
	var text string
	var ok bool
	if err := s.Backend().View(ctx, "last check", func(r storage.Reader) (err error) {
		text, ok, err = r.Meta(storage.LastCheckKey)
		return err
	}); err != nil || !ok {
		return nil, err
	}
	var sum CheckSummary
	if json.Unmarshal([]byte(text), &sum) != nil {
		return nil, nil
	}
	return &sum, nil
}

// checkOpen adds what the tables and claims of the open store s show to
// rep.
func checkOpen(ctx context.Context, rep *CheckReport, s *core.Store, repair bool) (*CheckReport, error) {
	var err error
	rep.Path, rep.Notices = s.Path(), s.Notices()
	err = s.Backend().View(ctx, "check", func(r storage.Reader) error {
		v, _, err := r.Meta("schema_version")
		if err != nil {
			return err
		}
		rep.SchemaVersion = v
		if rep.Tables, err = r.CheckTables(); err != nil || rep.Tables.Orphans < 0 {
			return err
		}
		if rep.Records, err = r.CountRecords(); err != nil {
			return err
		}
		rep.Programs, err = r.CountPrograms()
		return err
	})
	if k := core.KindOf(err); err != nil && (k == core.KindDatabase || k == core.KindOperational) {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the database cannot be read (integrity check failed): %v", err))
		return rep, nil
	}
	if err != nil {
		return nil, err
	}
	if rep.SchemaVersion != strconv.Itoa(sqlite.SchemaVersion) {
		rep.Problems = append(rep.Problems, fmt.Sprintf("schema_version is %q, this library's is %d", rep.SchemaVersion, sqlite.SchemaVersion))
	}
	if rep.Tables == nil {
		return rep, nil
	}
	if t := rep.Tables; len(t.Integrity) != 1 || t.Integrity[0] != "ok" {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the integrity check failed (%d messages): restore a backup, or export what is readable", len(t.Integrity)))
	}
	if rep.Tables.Orphans > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d records whose program row is missing (lookups cannot return them)", rep.Tables.Orphans))
	}
	if rep.Tables.BadResults > 0 {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d records whose result_json is not JSON or not a JSON object", rep.Tables.BadResults))
	}
	if t := rep.Tables; t.DeepCount > 0 {
		more := ""
		if n := t.DeepCount - int64(len(t.DeepValues)); n > 0 {
			more = fmt.Sprintf(" and %d more", n)
		}
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d stored JSON values nest deeper than the %d levels a stored value may have, "+
			"which Python's json cannot read back reliably and readers refuse (ValueError): %s%s; delete them or store them anew",
			t.DeepCount, limits.MaxValueDepth, strings.Join(t.DeepValues, ", "), more))
	}
	// Measurement claims, once the tables are known to be sound.
	if t := rep.Tables; len(t.Integrity) != 1 || t.Integrity[0] != "ok" {
		return rep, nil
	}
	if rep.StaleClaims, err = s.StaleClaims(ctx, repair); err != nil {
		return nil, err
	}
	for _, c := range rep.StaleClaims {
		why := "its holder died"
		switch {
		case c.Recorded:
			why = "its schedule is recorded"
		case c.JobEnded:
			why = fmt.Sprintf("its Slurm job %s ended: %s", c.SlurmJobID, c.JobState)
		}
		what := fmt.Sprintf("the measurement claim on %s of %s by %s pid %d (%s)", schedule.Repr(c.Schedule), c.ProgramName, c.Hostname, c.PID, why)
		if repair {
			rep.Repaired = append(rep.Repaired, "removed "+what)
		} else {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s is stale: `tirastore check --repair %s` removes it", what, sqlitefile.ShellQuote(rep.Path)))
		}
	}
	return rep, nil
}
