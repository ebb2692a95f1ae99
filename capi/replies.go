package main

import (
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/operator"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/timing"
)

// # The shapes of the replies
//
// Every reply's JSON shape is written here, once: a function converts
// what the engine returned (a core or core/operator value) into the
// pyjson values the reply encodes (*pyjson.Object keeps the key order the
// Python bindings and the original library show). The engine's types
// carry no JSON form of their own, and the call table (methods.go) only
// reads arguments, calls the engine and hands its result to one of these.
// The Python tests and tests/c compare the replies byte for byte.

// replyWith converts a result with conv, unless the call failed (the
// result is then not converted: it may be nil): replyWith(conv)(call()).
func replyWith[T any](conv func(T) any) func(T, error) (any, error) {
	return func(v T, err error) (any, error) {
		if err != nil {
			return nil, err
		}
		return conv(v), nil
	}
}

// replyEach converts each element of a result list with conv ([] when
// empty), unless the call failed: replyEach(conv)(call()).
func replyEach[T any](conv func(T) any) func([]T, error) (any, error) {
	return func(xs []T, err error) (any, error) {
		if err != nil {
			return nil, err
		}
		out := make([]any, len(xs))
		for i, x := range xs {
			out[i] = conv(x)
		}
		return out, nil
	}
}

// replyStrings is a list of strings as a reply list.
func replyStrings(xs []string) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// nullIfEmpty is JSON null for "", else s.
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// nullIfNil is JSON null for nil, else *p.
func nullIfNil(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// replyStoreInfo is what open returns and "info" repeats: what the caller
// needs to build its own handle object (a map: its keys are written
// sorted).
func replyStoreInfo(st *core.Store) map[string]any {
	return map[string]any{
		"db_path":        st.Path(),
		"server":         st.IsServer(), // db_path is a server's URL (without its password), not a file
		"lock_path":      st.LockPath(),
		"source_project": st.SourceProject(),
		"writes_allowed": st.WritesAllowed(),
		"warning":        st.Warning(),
		"notices":        st.Notices(), // a directory others cannot use (Python: TiraStoreWarning)
	}
}

// replyValidation is validate_schedule's [ok, reason].
func replyValidation(ok bool, reason string) any { return []any{ok, reason} }

// replyErrorTable is core/apierr.Table, one {"status", "name", "python",
// "doc"} object per row in status order.
func replyErrorTable() any {
	rows := make([]any, len(apierr.Table))
	for i, e := range apierr.Table {
		row := pyjson.NewObjectCap(4)
		row.Set("status", e.Status)
		row.Set("name", e.CName)
		row.Set("python", e.Python)
		row.Set("doc", e.Doc)
		rows[i] = row
	}
	return rows
}

// replyLimits are core/limits' figures: {max_value_depth, max_text_bytes,
// max_request_bytes}.
func replyLimits() any {
	o := pyjson.NewObjectCap(3)
	o.Set("max_value_depth", limits.MaxValueDepth)
	o.Set("max_text_bytes", limits.TextLimit())
	o.Set("max_request_bytes", limits.RequestLimit())
	return o
}

// replyResult is a result as an object of the original's LookupResult
// fields, in their order: the stored JSON values untouched (a stored list
// of numbers in its compact text: core.Result.Stored), then the texts;
// then "stable" (replyStable) and "stats" (replyStatsText); and
// "censored" only for a record that has no time of its own (the times of
// a "timeout" are its limit, a lower bound).
func replyResult(r *core.Result) any {
	legal, times := r.Stored()
	o := pyjson.NewObjectCap(11)
	o.Set("is_legal", legal)
	o.Set("execution_times", times)
	o.Set("schedule", r.Schedule)
	o.Set("hostname", r.Hostname)
	o.Set("username", r.Username)
	o.Set("creation_date", r.CreationDate)
	o.Set("update_date", r.UpdateDate)
	o.Set("source_project", r.SourceProject)
	o.Set("stable", replyStable(r))
	o.Set("stats", replyStatsText(r))
	if r.Censored != "" {
		o.Set("censored", r.Censored)
	}
	return o
}

// replyTimingStats is {count, median, mad, min, spread} of st, or null
// for no finite time (core/timing).
func replyTimingStats(st timing.Stats) any {
	if st.Count == 0 {
		return nil
	}
	o := pyjson.NewObjectCap(5)
	o.Set("count", st.Count)
	o.Set("median", st.Median)
	o.Set("mad", st.MAD)
	o.Set("min", st.Min)
	o.Set("spread", st.Spread)
	return o
}

// replyStable is whether r's times meet the store's noise policy, null
// without a finite time or when its time is a bound (a timeout).
func replyStable(r *core.Result) any {
	if r.Stats.Count == 0 || r.Stats.LowerBound {
		return nil
	}
	return !r.Unstable
}

// replyStatsText is r's statistics as one string of numbers, "count
// median mad min spread" as Python's repr writes them, or null without a
// finite time. A string, not five numbers: it comes with every lookup
// hit, where a JSON reader's parse of five 17-digit numbers cost a
// Python caller a tenth of the call, and a string's costs nearly
// nothing until the numbers are read (strtod in C; float in Python).
func replyStatsText(r *core.Result) any {
	st := &r.Stats
	if st.Count == 0 {
		return nil
	}
	b := make([]byte, 0, 96)
	b = strconv.AppendInt(b, int64(st.Count), 10)
	for _, f := range [...]float64{st.Median, st.MAD, st.Min, st.Spread} {
		b = pyjson.AppendFloat(append(b, ' '), f)
	}
	return string(b)
}

// replyRun is one run of a record: {count, times, context, fingerprint,
// slurm_job_id, load_avg, mhz, date, differs}, the context as stored (an
// object; null when unknown), load_avg and mhz null when they were
// unreadable, differs what the store's fingerprint rules find different
// (replyMismatch; null when it matches or without rules).
func replyRun(r *core.MeasurementRun) any {
	o := pyjson.NewObjectCap(9)
	o.Set("count", r.Count)
	times := make([]any, len(r.Times))
	for i, t := range r.Times {
		times[i] = t
	}
	o.Set("times", times)
	if r.Context != nil {
		o.Set("context", pyjson.Raw(r.Context.JSON()))
	} else {
		o.Set("context", nil)
	}
	o.Set("fingerprint", r.Run.Context)
	o.Set("slurm_job_id", r.SlurmJobID)
	o.Set("load_avg", core.UnreadableAsNil(r.LoadAvg))
	o.Set("mhz", core.UnreadableAsNil(r.MHz))
	o.Set("date", r.At)
	o.Set("differs", replyMismatch(r.Differs))
	return o
}

// replyNoisePolicy is {max_spread, max_remeasures}.
func replyNoisePolicy(p core.NoisePolicy) any {
	o := pyjson.NewObjectCap(2)
	o.Set("max_spread", p.MaxSpread)
	o.Set("max_remeasures", p.MaxRemeasures)
	return o
}

// replyResults is lookup_many's list: a result, or null for a miss.
func replyResults(rs []*core.Result) any {
	out := make([]any, len(rs))
	for i, r := range rs {
		if r != nil {
			out[i] = replyResult(r)
		}
	}
	return out
}

// replyProgramSource is the original's dict: {"program_hash",
// "source_code"}.
func replyProgramSource(p core.ProgramSource) any {
	o := pyjson.NewObject()
	o.Set("program_hash", p.ProgramHash)
	o.Set("source_code", p.SourceCode)
	return o
}

// replyStats is the original's stats() dict, in its key order.
func replyStats(st *core.Stats) any {
	o := pyjson.NewObject()
	o.Set("total_records", st.TotalRecords)
	o.Set("legal_records", st.LegalRecords)
	o.Set("illegal_records", st.IllegalRecords)
	o.Set("total_programs", st.TotalPrograms)
	o.Set("source_projects", st.SourceProjects)
	o.Set("users", st.Users)
	o.Set("cpu_model", nullIfNil(st.CPUModel))
	o.Set("slurm_cpus", nullIfNil(st.SlurmCPUs))
	return o
}

// replyProgramStat is {program_name, program_hash, records, legal,
// illegal, first_record, last_record} (the dates null without records).
func replyProgramStat(p *core.ProgramStat) any {
	o := pyjson.NewObjectCap(7)
	o.Set("program_name", p.Name)
	o.Set("program_hash", p.Hash)
	o.Set("records", p.Records)
	o.Set("legal", p.Legal)
	o.Set("illegal", p.Records-p.Legal)
	o.Set("first_record", nullIfEmpty(p.FirstDate))
	o.Set("last_record", nullIfEmpty(p.LastDate))
	return o
}

// replyRawRecord is the original's get() dict: the record columns, then
// program_name and source_code.
func replyRawRecord(r *core.RawRecord) any {
	o := pyjson.NewObject()
	for _, kv := range [][2]string{
		{"key", r.Key}, {"program_hash", r.ProgramHash}, {"schedule", r.Schedule},
		{"result_json", r.ResultJSON}, {"hostname", r.Hostname}, {"username", r.Username},
		{"creation_date", r.CreationDate}, {"update_date", r.UpdateDate},
		{"source_project", r.SourceProject}, {"program_name", r.ProgramName}, {"source_code", r.SourceCode},
	} {
		o.Set(kv[0], kv[1])
	}
	return o
}

// replyClaimHolder is who holds a claim, as a dict.
func replyClaimHolder(h *core.ClaimHolder) any {
	return claimHolderObject(h)
}

// claimHolderObject is replyClaimHolder's object, with room for check's
// "recorded".
func claimHolderObject(h *core.ClaimHolder) *pyjson.Object {
	o := pyjson.NewObjectCap(17)
	o.Set("key", h.Key)
	o.Set("program_hash", h.ProgramHash)
	o.Set("program_name", h.ProgramName)
	o.Set("tiralib_schedule_string", h.Schedule)
	o.Set("hostname", h.Hostname)
	o.Set("pid", h.PID)
	o.Set("slurm_job_id", nullIfEmpty(h.SlurmJobID))
	o.Set("slurm_cluster", nullIfEmpty(h.SlurmCluster))
	o.Set("job_state", nullIfEmpty(h.JobState))
	o.Set("job_ended", h.JobEnded)
	o.Set("username", h.Username)
	o.Set("lease", h.Lease.Seconds())
	o.Set("renewals", h.Renewals)
	o.Set("claimed_at", h.ClaimedAt)
	o.Set("renewed_at", h.RenewedAt)
	o.Set("dead", h.Dead)
	return o
}

// replyClaim is this caller's claim, as a dict.
func replyClaim(c *core.Claim) any {
	o := pyjson.NewObjectCap(8)
	o.Set("token", c.Token())
	o.Set("key", c.Key())
	o.Set("program_name", c.ProgramName())
	o.Set("program_hash", c.ProgramHash())
	o.Set("tiralib_schedule_string", c.Schedule())
	o.Set("lease", c.Lease().Seconds())
	o.Set("remeasure", c.Remeasure())
	o.Set("mismatch", replyMismatch(c.Mismatch()))
	return o
}

// replyMismatch is {field: [theirs, ours]} (core.Mismatch), null for none.
func replyMismatch(m core.Mismatch) any {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	o := pyjson.NewObjectCap(len(m))
	for _, k := range keys {
		o.Set(k, []any{m[k][0], m[k][1]})
	}
	return o
}

// replyClaimOutcome is a dict with one key: "result", "claim" or "busy".
func replyClaimOutcome(out core.ClaimOutcome) any {
	d := pyjson.NewObjectCap(1)
	switch {
	case out.Result != nil:
		d.Set("result", replyResult(out.Result))
	case out.Claim != nil:
		d.Set("claim", replyClaim(out.Claim))
	default:
		d.Set("busy", replyClaimHolder(out.Busy))
	}
	return d
}

// replyConfigEntry is {namespace, device, op_id, call_key, value,
// hostname, username, creation_date, update_date}, the value as stored; a
// value stored nested deeper than limits.MaxValueDepth is left out and
// "error" says why in its place, so that a binding's listing decodes the
// other entries.
func replyConfigEntry(e *core.ConfigEntry) any {
	o := pyjson.NewObjectCap(9)
	o.Set("namespace", e.Namespace)
	o.Set("device", e.Device)
	o.Set("op_id", e.OpID)
	o.Set("call_key", e.CallKey)
	if msg := e.TooDeep(); msg != "" {
		o.Set("error", msg)
	} else {
		o.Set("value", pyjson.Raw(e.ValueJSON))
	}
	o.Set("hostname", e.Hostname)
	o.Set("username", e.Username)
	o.Set("creation_date", e.CreationDate)
	o.Set("update_date", e.UpdateDate)
	return o
}

// replyConfigValue is config_value's [value] (a stored null stays
// distinguishable from a miss, which is null).
func replyConfigValue(e *core.ConfigEntry) any {
	return []any{pyjson.Raw(e.ValueJSON)}
}

// replyConfigExport is config_export's {path, entries}.
func replyConfigExport(path string, entries int64) any {
	o := pyjson.NewObjectCap(2)
	o.Set("path", path)
	o.Set("entries", entries)
	return o
}

// replyConfigImport is config_import's dict.
func replyConfigImport(r *core.ConfigImportResult) any {
	o := pyjson.NewObjectCap(11)
	o.Set("path", r.Path)
	o.Set("found", r.Found)
	o.Set("entries", r.Entries)
	o.Set("added", r.Added)
	o.Set("replaced", r.Replaced)
	o.Set("kept", r.Kept)
	o.Set("skipped", r.Skipped)
	o.Set("changed", r.Changed)
	o.Set("imported_at", r.ImportedAt)
	o.Set("imported_by", r.ImportedBy)
	o.Set("notice", r.Notice)
	return o
}

// replyConfigPlace is config_location's dict: db_path, json_path (null
// without one), namespace, path, sharing (the name of tirastore_open's
// option), db_exists, import_json, disabled (null unless disabled),
// notices.
func replyConfigPlace(pl *core.ConfigPlace) any {
	o := pyjson.NewObjectCap(9)
	o.Set("db_path", pl.DBPath)
	o.Set("json_path", nullIfEmpty(pl.JSONPath))
	o.Set("namespace", pl.Namespace)
	o.Set("path", pl.Path)
	o.Set("sharing", pl.Sharing.String())
	o.Set("db_exists", pl.DBExists)
	o.Set("import_json", pl.ImportJSON)
	o.Set("disabled", nullIfEmpty(pl.Disabled))
	o.Set("notices", replyStrings(pl.Notices))
	return o
}

// replyLockStatus is {lock_path, held, holder, unreadable,
// unchanged_seconds, abandoned, advice, stale_lock_timeout, broken};
// holder is null when free or not a record (unreadable then says why, and
// unchanged_seconds how long ago the file last changed), else {hostname,
// pid, timestamp, age_seconds, heartbeat_interval, on_this_host, alive,
// dead, stale, overdue, watch_seconds} (alive null when the holder is on
// another host; watch_seconds: how long lock_break watches an overdue
// holder).
func replyLockStatus(s *operator.LockStatus) any {
	o := pyjson.NewObjectCap(9)
	o.Set("lock_path", s.Path)
	o.Set("held", s.Held)
	if h := s.Holder; h != nil {
		ho := pyjson.NewObjectCap(10)
		ho.Set("hostname", h.Hostname)
		ho.Set("pid", h.PID)
		if math.IsNaN(h.Timestamp) || math.IsInf(h.Timestamp, 0) {
			ho.Set("timestamp", nil)
		} else {
			ho.Set("timestamp", h.Timestamp)
		}
		ho.Set("age_seconds", s.Age.Seconds())
		ho.Set("heartbeat_interval", s.Heartbeat.Seconds())
		ho.Set("on_this_host", s.OnThisHost)
		if s.OnThisHost {
			ho.Set("alive", s.Alive)
		} else {
			ho.Set("alive", nil)
		}
		ho.Set("dead", s.Dead)
		ho.Set("stale", s.Stale)
		ho.Set("overdue", s.Overdue)
		ho.Set("watch_seconds", s.Watch.Seconds())
		o.Set("holder", ho)
	} else {
		o.Set("holder", nil)
	}
	if s.Unreadable != nil {
		o.Set("unreadable", s.Unreadable.Error())
		o.Set("unchanged_seconds", s.Age.Seconds())
	} else {
		o.Set("unreadable", nil)
		o.Set("unchanged_seconds", nil)
	}
	o.Set("abandoned", s.Abandoned())
	o.Set("advice", s.Advice)
	o.Set("stale_lock_timeout", s.StaleTimeout.Seconds())
	o.Set("broken", s.Broken)
	return o
}

// replyCheckReport is check's report as a dict.
func replyCheckReport(r *operator.CheckReport) any {
	o := pyjson.NewObjectCap(14)
	o.Set("db_path", r.Path)
	o.Set("ok", len(r.Problems) == 0)
	o.Set("problems", replyStrings(r.Problems))
	o.Set("repaired", replyStrings(r.Repaired))
	if r.Lock != nil {
		o.Set("lock", replyLockStatus(r.Lock))
	} else {
		o.Set("lock", nil)
	}
	o.Set("leftover_claims", replyStrings(r.Leftovers))
	o.Set("hot_journal", r.HotJournal)
	if j := r.ForeignJournal; j != nil {
		jo := pyjson.NewObjectCap(6)
		jo.Set("path", j.Path)
		jo.Set("kind", j.Kind)
		jo.Set("owner_uid", j.UID)
		jo.Set("mode", fmt.Sprintf("%04o", j.Mode))
		jo.Set("why", j.Why())
		jo.Set("moved_to", r.JournalMovedTo)
		o.Set("foreign_journal", jo)
	} else {
		o.Set("foreign_journal", nil)
	}
	o.Set("schema_version", r.SchemaVersion)
	if t := r.Tables; t != nil {
		to := pyjson.NewObjectCap(5)
		to.Set("integrity", replyStrings(t.Integrity))
		to.Set("orphan_records", t.Orphans)
		to.Set("bad_results", t.BadResults)
		to.Set("too_deep_values", t.DeepCount)
		to.Set("too_deep_listed", replyStrings(t.DeepValues))
		o.Set("tables", to)
	} else {
		o.Set("tables", nil)
	}
	o.Set("records", r.Records)
	o.Set("programs", r.Programs)
	sc := make([]any, len(r.StaleClaims))
	for i, c := range r.StaleClaims {
		co := claimHolderObject(c)
		co.Set("recorded", c.Recorded)
		sc[i] = co
	}
	o.Set("stale_measurement_claims", sc)
	o.Set("notices", replyStrings(r.Notices))
	return o
}

// transferObject is import's and merge's counts: {programs, records,
// added, same, conflicts, replaced, merged, next, size, conflict_list:
// [{program_name, schedule, stored, incoming}]} (next null when done).
func transferObject(r *operator.TransferResult) *pyjson.Object {
	o := pyjson.NewObjectCap(10)
	for _, f := range []struct {
		k string
		v int64
	}{{"programs", r.Programs}, {"records", r.Records}, {"added", r.Added}, {"same", r.Same},
		{"conflicts", r.Conflicts}, {"replaced", r.Replaced}, {"merged", r.Merged}} {
		o.Set(f.k, f.v)
	}
	if r.Next < 0 {
		o.Set("next", nil)
	} else {
		o.Set("next", r.Next)
	}
	o.Set("size", r.Size)
	list := make([]any, len(r.ConflictList))
	for i, c := range r.ConflictList {
		co := pyjson.NewObjectCap(4)
		co.Set("program_name", c.ProgramName)
		co.Set("schedule", c.Schedule)
		co.Set("stored", pyjson.Raw(c.Stored))
		co.Set("incoming", pyjson.Raw(c.Incoming))
		list[i] = co
	}
	o.Set("conflict_list", list)
	return o
}

// replyTransfer is import's reply (transferObject).
func replyTransfer(r *operator.TransferResult) any { return transferObject(r) }

// replyMerge is import's reply with next as {program_name, program_hash}
// or null, and no size.
func replyMerge(r *operator.MergeResult) any {
	o := transferObject(&r.TransferResult)
	if r.NextCursor == nil {
		o.Set("next", nil)
	} else {
		c := pyjson.NewObjectCap(2)
		c.Set("program_name", r.NextCursor.Name)
		c.Set("program_hash", r.NextCursor.Hash)
		o.Set("next", c)
	}
	o.Delete("size")
	return o
}

// replyOutput is output_create's {path, token, fd}.
func replyOutput(path string, token int64, fd int) any {
	r := pyjson.NewObjectCap(3)
	r.Set("path", path)
	r.Set("token", token)
	r.Set("fd", fd)
	return r
}
