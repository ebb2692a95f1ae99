package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/operator"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/timing"
)

// method is one entry of the call table. Methods with store == false are
// the standalone utilities and take handle 0.
type method struct {
	store  bool
	params []string // the accepted argument names; anything else is a TypeError
	run    func(ctx context.Context, st *core.Store, a *args) (any, error)
}

var (
	noParams []string
	// readParams: the reads also accept program_hash (what make_program_hash
	// returns) instead of program_source_code, so that a binding need not
	// send a long source with every lookup. So do record and record_many,
	// once the program is stored (core.ProgramRef).
	readParams = []string{"program_name", "program_source_code", "program_hash", "tiralib_schedule_string"}
	// configParams name a kernel-config entry: its namespace (optional,
	// "" by default) and the parts of the seed's key.
	configParams = []string{"namespace", "device", "op_id", "call_key"}
	// configGetParams: a get may also take configurations tuned under
	// other device fingerprints (core/config.go, "Device fingerprints").
	configGetParams = append(configParams[:len(configParams):len(configParams)], "other_devices")
	recordParams    = []string{"program_name", "program_source_code", "program_hash", "tiralib_schedule_string", "is_legal", "execution_times", "overwrite",
		"censored", "timed_out_after"}
)

// methods is the whole C-callable API besides open/close. New commands (the
// operations CLI, the config cache) are new entries here; the ABI itself
// does not change.
var methods = map[string]method{
	"version": {false, noParams, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		return core.Version, nil
	}},
	"normalize_schedule": {false, []string{"schedule"}, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		s, err := a.str("schedule")
		if err != nil {
			return nil, err
		}
		return schedule.Normalize(s), nil
	}},
	"validate_schedule": {false, []string{"schedule"}, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		s, err := a.str("schedule")
		if err != nil {
			return nil, err
		}
		return replyValidation(schedule.Validate(s)), nil
	}},
	"normalize_program": {false, []string{"source"}, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		s, err := a.str("source")
		if err != nil {
			return nil, err
		}
		return schedule.NormalizeProgram(s), nil
	}},
	"make_program_hash": {false, []string{"source"}, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		s, err := a.str("source")
		if err != nil {
			return nil, err
		}
		return core.ProgramHash(s), nil
	}},
	// error_table is core/apierr.Table, one {"status", "name", "python",
	// "doc"} object per row in status order: what a binding needs to map
	// the "code" and "type" of an error reply without a table of its own.
	"error_table": {false, noParams, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		return replyErrorTable(), nil
	}},
	// limits are core/limits: what a binding must know before it builds
	// a call (the longest text it may send) and what its documentation
	// quotes, from the one place that defines them.
	"limits": {false, noParams, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		return replyLimits(), nil
	}},
	// timing_stats are the statistics a result's times get (core/timing),
	// for a result a binding made itself (a lookup's reply carries them
	// as "stats", one string of numbers: replyStatsText).
	"timing_stats": {false, []string{"execution_times"}, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		nums, err := a.times(a.obj, "")
		if err != nil {
			return nil, err
		}
		times := make([]float64, len(nums))
		for i, n := range nums {
			if times[i], err = n.Float64(); err != nil {
				return nil, &core.Error{Kind: core.KindValue, Message: fmt.Sprintf("%s(): execution_times[%d] is not a number: %s", a.method, i, n)}
			}
		}
		st, _ := timing.Summarize(times)
		return replyTimingStats(st), nil
	}},
	"make_record_key": {false, []string{"program_hash", "tiralib_schedule_string"}, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		h, err := a.str("program_hash")
		if err != nil {
			return nil, err
		}
		s, err := a.str("tiralib_schedule_string")
		if err != nil {
			return nil, err
		}
		return keys.RecordKey(h, s), nil
	}},

	"info": {true, noParams, func(_ context.Context, st *core.Store, a *args) (any, error) {
		return replyStoreInfo(st), nil
	}},
	"lookup": {true, readParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		name, prog, sched, err := readArgs(a, true)
		if err != nil {
			return nil, err
		}
		var r *core.Result
		if prog.ByHash {
			r, err = st.LookupByHash(ctx, name, prog.Hash, sched)
		} else {
			r, err = st.Lookup(ctx, name, prog.Source, sched)
		}
		if r == nil || err != nil {
			return nil, err
		}
		return replyResult(r), nil
	}},
	"runs": {true, readParams[:len(readParams):len(readParams)], func(ctx context.Context, st *core.Store, a *args) (any, error) {
		name, prog, sched, err := readArgs(a, true)
		if err != nil {
			return nil, err
		}
		if prog.ByHash {
			return nil, &core.Error{Kind: core.KindValue, Message: a.method + "(): give program_source_code"}
		}
		runs, err := st.Runs(ctx, name, prog.Source, sched)
		if err != nil || runs == nil {
			return nil, err
		}
		out := make([]any, len(runs))
		for i := range runs {
			out[i] = replyRun(&runs[i])
		}
		return out, nil
	}},
	// stability counts the records by the noise policy (tirastore stats).
	"stability": {true, noParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		s, err := st.Stability(ctx)
		if err != nil {
			return nil, err
		}
		o := pyjson.NewObjectCap(6)
		o.Set("policy", replyNoisePolicy(s.Policy))
		o.Set("timed", s.Timed)
		o.Set("unstable", s.Unstable)
		o.Set("median_spread", s.MedianSpread)
		o.Set("timed_out", s.TimedOut)
		o.Set("compile_failures", s.CompileFailure)
		return o, nil
	}},
	"noise_policy": {true, noParams, func(_ context.Context, st *core.Store, a *args) (any, error) {
		return replyNoisePolicy(st.NoisePolicy()), nil
	}},
	// set_noise_policy changes the fields given, keeping the others.
	"set_noise_policy": {true, []string{"max_spread", "max_remeasures"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		p := st.NoisePolicy()
		f, err := a.number("max_spread")
		if err != nil {
			return nil, err
		}
		if f != nil {
			p.MaxSpread = *f
		}
		n, err := a.integer("max_remeasures", int64(p.MaxRemeasures))
		if err != nil {
			return nil, err
		}
		p.MaxRemeasures = int(n)
		if err := st.SetNoisePolicy(ctx, p); err != nil {
			return nil, err
		}
		return replyNoisePolicy(p), nil
	}},
	"close_if_idle": {true, nil, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		return st.CloseIfIdle()
	}},
	"lookup_many": {true, []string{"program_name", "program_source_code", "program_hash", "schedules"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		name, prog, _, err := readArgs(a, false)
		if err != nil {
			return nil, err
		}
		scheds, err := a.strList("schedules")
		if err != nil {
			return nil, err
		}
		var rs []*core.Result
		if prog.ByHash {
			rs, err = st.LookupManyByHash(ctx, name, prog.Hash, scheds)
		} else {
			rs, err = st.LookupMany(ctx, name, prog.Source, scheds)
		}
		if err != nil {
			return nil, err
		}
		return replyResults(rs), nil
	}},
	// Claims (core/claim.go): lookup_or_claim answers {"result": ...},
	// {"claim": {...}} or {"busy": holder}; the claim's token names it in
	// claim_record and claim_release.
	"lookup_or_claim": {true, append(readParams[:len(readParams):len(readParams)], "lease", "wait", "remeasure_unstable"), func(ctx context.Context, st *core.Store, a *args) (any, error) {
		name, prog, sched, err := readArgs(a, true)
		if err != nil {
			return nil, err
		}
		opts, err := claimOptions(a, true)
		if err != nil {
			return nil, err
		}
		var out core.ClaimOutcome
		if prog.ByHash {
			out, err = st.LookupOrClaimByHash(ctx, name, prog.Hash, sched, opts)
		} else {
			out, err = st.LookupOrClaim(ctx, name, prog.Source, sched, opts)
		}
		if err != nil {
			return nil, err
		}
		return replyClaimOutcome(out), nil
	}},
	"lookup_many_or_claim": {true, []string{"program_name", "program_source_code", "program_hash", "schedules", "lease", "wait", "remeasure_unstable"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		name, prog, _, err := readArgs(a, false)
		if err != nil {
			return nil, err
		}
		scheds, err := a.strList("schedules")
		if err != nil {
			return nil, err
		}
		opts, err := claimOptions(a, false)
		if err != nil {
			return nil, err
		}
		if prog.ByHash {
			return replyEach(replyClaimOutcome)(st.LookupManyOrClaimByHash(ctx, name, prog.Hash, scheds, opts))
		}
		return replyEach(replyClaimOutcome)(st.LookupManyOrClaim(ctx, name, prog.Source, scheds, opts))
	}},
	"claim_record": {true, []string{"token", "program_source_code", "is_legal", "execution_times", "censored", "timed_out_after"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		c, err := heldClaim(st, a)
		if err != nil {
			return nil, err
		}
		if _, ok := a.get("program_source_code"); ok {
			src, err := a.str("program_source_code")
			if err != nil {
				return nil, err
			}
			if err := c.SetSource(src); err != nil {
				return nil, err
			}
		}
		m, err := a.outcome(a.obj, "")
		if err != nil {
			return nil, err
		}
		return c.Record(ctx, m)
	}},
	"claim_release": {true, []string{"token"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		c, err := heldClaim(st, a)
		if c == nil {
			return nil, err
		}
		return nil, c.Release(ctx)
	}},
	"claim_status": {true, []string{"token"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		tok, err := a.str("token")
		if err != nil {
			return nil, err
		}
		c := st.HeldClaim(tok)
		if c == nil {
			return "ended", nil
		}
		if c.TakenOver() {
			return "taken_over", nil
		}
		return "held", nil
	}},
	"claims": {true, noParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		return replyEach(replyClaimHolder)(st.Claims(ctx))
	}},
	"contains": {true, readParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		name, prog, sched, err := readArgs(a, true)
		if err != nil {
			return nil, err
		}
		if prog.ByHash {
			return st.ContainsByHash(ctx, name, prog.Hash, sched)
		}
		return st.Contains(ctx, name, prog.Source, sched)
	}},
	"record": {true, recordParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		name, prog, _, err := readArgs(a, false)
		if err != nil {
			return nil, err
		}
		m, err := a.measurement(a.obj, "")
		if err != nil {
			return nil, err
		}
		overwrite, err := a.boolean("overwrite", false)
		if err != nil {
			return nil, err
		}
		return st.RecordRef(ctx, name, prog, m, overwrite)
	}},
	"record_many": {true, []string{"program_name", "program_source_code", "program_hash", "schedules", "overwrite"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		name, prog, _, err := readArgs(a, false)
		if err != nil {
			return nil, err
		}
		ms, err := a.schedules("schedules")
		if err != nil {
			return nil, err
		}
		overwrite, err := a.boolean("overwrite", false)
		if err != nil {
			return nil, err
		}
		return st.RecordManyRef(ctx, name, prog, ms, overwrite)
	}},
	"get_program_source": {true, []string{"program_name"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		name, err := a.str("program_name")
		if err != nil {
			return nil, err
		}
		return replyEach(replyProgramSource)(st.GetProgramSource(ctx, name))
	}},
	"get_program_records": {true, []string{"program_name", "program_source_code"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		name, src, _, err := programArgs(a, false)
		if err != nil {
			return nil, err
		}
		return replyEach(replyResult)(st.GetProgramRecords(ctx, name, src))
	}},
	"backup": {true, []string{"backup_path"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		p, err := a.optStr("backup_path")
		if err != nil {
			return nil, err
		}
		return st.Backup(ctx, p)
	}},
	"export": {true, []string{"output_path", "fmt", "runs"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		p, err := a.str("output_path")
		if err != nil {
			return nil, err
		}
		f, err := a.optStr("fmt")
		if err != nil {
			return nil, err
		}
		if _, given := a.obj.Get("fmt"); !given {
			f = "json"
		}
		runs, err := a.boolean("runs", false)
		if err != nil {
			return nil, err
		}
		out, warnings, err := operator.Export(ctx, st, p, f, runs)
		if err != nil {
			return nil, err
		}
		return withWarnings(out, warnings), nil
	}},
	"count": {true, noParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		return st.Count(ctx)
	}},
	"program_count": {true, noParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		return st.ProgramCount(ctx)
	}},
	"stats": {true, noParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		stats, err := st.Stats(ctx)
		if err != nil {
			return nil, err
		}
		return withWarnings(replyStats(stats), stats.Warnings), nil
	}},
	"keys": {true, []string{"limit", "offset"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		limit, err := a.integer("limit", 0)
		if err != nil {
			return nil, err
		}
		offset, err := a.integer("offset", 0)
		if err != nil {
			return nil, err
		}
		return st.Keys(ctx, limit, offset)
	}},
	"get": {true, []string{"key"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		k, err := a.str("key")
		if err != nil {
			return nil, err
		}
		r, err := st.Get(ctx, k)
		if r == nil || err != nil {
			return nil, err
		}
		return replyRawRecord(r), nil
	}},
	"put": {true, []string{"key", "program_hash", "schedule", "result_json", "overwrite"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		var f [4]string
		for i, n := range []string{"key", "program_hash", "schedule", "result_json"} {
			var err error
			if f[i], err = a.str(n); err != nil {
				return nil, err
			}
		}
		overwrite, err := a.boolean("overwrite", false)
		if err != nil {
			return nil, err
		}
		return st.Put(ctx, f[0], f[1], f[2], f[3], overwrite)
	}},
	"delete": {true, []string{"key"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		k, err := a.str("key")
		if err != nil {
			return nil, err
		}
		return st.Delete(ctx, k)
	}},
	// The kernel-config cache (core/config.go): ejKernel's PersistentCache.
	"config_get": {true, configGetParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		ns, d, op, ck, err := configArgs(a)
		if err != nil {
			return nil, err
		}
		other, err := a.boolean("other_devices", false)
		if err != nil {
			return nil, err
		}
		e, err := st.ConfigGet(ctx, ns, d, op, ck, other)
		if e == nil || err != nil {
			return nil, err
		}
		return replyConfigEntry(e), nil
	}},
	// config_check checks the namespace, device, op_id and call_key of a
	// call of the config method named by "call" as that method does, with
	// its messages (handle 0; null result), for a binding that answers
	// without a database (a cache whose database does not exist yet).
	"config_check": {false, []string{"call", "namespace", "device", "op_id", "call_key"}, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		m, err := a.str("call")
		if err != nil {
			return nil, err
		}
		name, ok := pythonNames[m]
		if !ok || !strings.HasPrefix(m, "config_") {
			return nil, &core.Error{Kind: core.KindValue, Message: fmt.Sprintf("config_check(): call must name a config method, got %q", m)}
		}
		a.method = name
		ns, d, op, ck, err := configArgs(a)
		if err != nil {
			return nil, err
		}
		return nil, core.CheckConfigRef(ns, d, op, ck)
	}},
	// config_value is config_get's fast form for bindings: [value] on a
	// hit (a stored null stays distinguishable), null on a miss, without
	// the entry's who and when.
	"config_value": {true, configGetParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		ns, d, op, ck, err := configArgs(a)
		if err != nil {
			return nil, err
		}
		other, err := a.boolean("other_devices", false)
		if err != nil {
			return nil, err
		}
		e, err := st.ConfigValue(ctx, ns, d, op, ck, other)
		if e == nil || err != nil {
			return nil, err
		}
		return replyConfigValue(e), nil
	}},
	"config_put": {true, []string{"namespace", "device", "op_id", "call_key", "value", "overwrite"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		ns, d, op, ck, err := configArgs(a)
		if err != nil {
			return nil, err
		}
		v, err := a.jsonValue("value", "key "+storage.ConfigName(ns, schedule.Repr(core.ConfigKey(d, op, ck))))
		if err != nil {
			return nil, err
		}
		overwrite, err := a.boolean("overwrite", true)
		if err != nil {
			return nil, err
		}
		return st.ConfigPut(ctx, ns, d, op, ck, v, overwrite)
	}},
	"config_delete": {true, configParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		ns, d, op, ck, err := configArgs(a)
		if err != nil {
			return nil, err
		}
		return st.ConfigDelete(ctx, ns, d, op, ck)
	}},
	"config_len": {true, []string{"namespace"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		ns, err := a.namespace()
		if err != nil {
			return nil, err
		}
		return st.ConfigLen(ctx, ns)
	}},
	// config_entries lists one namespace's entries ("" when the argument
	// is absent), or every namespace's with "namespace": null (tools).
	"config_entries": {true, []string{"namespace", "device", "op_id"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		var f core.ConfigFilter
		var err error
		switch v, ok := a.get("namespace"); {
		case ok && v == nil:
			f.AllNamespaces = true
		case ok:
			var isStr bool
			if f.Namespace, isStr = v.(string); !isStr {
				return nil, a.typeErr("namespace", "str or None", v)
			}
		}
		if f.Device, err = a.optStr("device"); err != nil {
			return nil, err
		}
		if f.OpID, err = a.optStr("op_id"); err != nil {
			return nil, err
		}
		return replyEach(replyConfigEntry)(st.ConfigEntries(ctx, f))
	}},
	"config_clear": {true, []string{"namespace"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		ns, err := a.namespace()
		if err != nil {
			return nil, err
		}
		return st.ConfigClear(ctx, ns)
	}},
	// Where a PersistentCache keeps its entries now (core/configplace.go):
	// nothing is created or opened. path null: none given.
	"config_location": {false, []string{"opname", "path", "shared"}, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		var pa core.ConfigPlaceArgs
		var err error
		if pa.Opname, err = a.str("opname"); err != nil {
			return nil, err
		}
		if v, ok := a.get("path"); ok && v != nil {
			if pa.Path, err = a.str("path"); err != nil {
				return nil, err
			}
			pa.PathGiven = true
		}
		if v, ok := a.get("shared"); ok && v != nil {
			b, err := a.boolean("shared", false)
			if err != nil {
				return nil, err
			}
			pa.Shared = &b
		}
		return replyWith(replyConfigPlace)(core.LocateConfigCache(pa))
	}},
	// The lock of a database, for operators (core/operator): handle 0,
	// since opening the database would take the lock.
	"lock_status": {false, []string{"db_path", "stale_lock_timeout"}, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		path, opts, err := lockArgs(a)
		if err != nil {
			return nil, err
		}
		return replyWith(replyLockStatus)(operator.InspectLock(path, opts))
	}},
	"check": {false, []string{"db_path", "stale_lock_timeout", "lock_timeout", "repair", "journal"}, func(ctx context.Context, _ *core.Store, a *args) (any, error) {
		path, opts, err := lockArgs(a)
		if err != nil {
			return nil, err
		}
		if opts.LockTimeout, err = a.seconds("lock_timeout"); err != nil {
			return nil, err
		}
		repair, err := a.boolean("repair", false)
		if err != nil {
			return nil, err
		}
		journal, err := a.journalChoice("journal")
		if err != nil {
			return nil, err
		}
		opts.Interruptible = interruptible
		return replyWith(replyCheckReport)(operator.CheckDatabase(ctx, path, opts, repair, journal))
	}},
	"lock_break": {false, []string{"db_path", "stale_lock_timeout", "force"}, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		path, opts, err := lockArgs(a)
		if err != nil {
			return nil, err
		}
		force, err := a.boolean("force", false)
		if err != nil {
			return nil, err
		}
		return replyWith(replyLockStatus)(operator.BreakLock(path, opts, force))
	}},
	// import_check is the error import ("export") or config_import
	// ("config") would give for input_path before writing anything: what
	// a command that creates its database asks first, so that a refused
	// input leaves no new database behind.
	"import_check": {false, []string{"input_path", "format", "namespace"}, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		path, err := a.str("input_path")
		if err != nil {
			return nil, err
		}
		format, err := a.str("format")
		if err != nil {
			return nil, err
		}
		switch format {
		case "export":
			return nil, operator.CheckImport(path)
		case "config":
			ns, err := a.namespace()
			if err != nil {
				return nil, err
			}
			return nil, core.CheckConfigImport(ns, path)
		}
		return nil, &core.Error{Kind: core.KindValue, Message: fmt.Sprintf("import_check(): format must be \"export\" or \"config\", got %q", format)}
	}},
	// import reads an export back in, a slice at a time
	// (core/operator/exportformat.go).
	"import": {true, []string{"input_path", "offset", "max_records", "overwrite", "list_conflicts"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		path, err := a.str("input_path")
		if err != nil {
			return nil, err
		}
		offset, err := a.integer("offset", 0)
		if err != nil {
			return nil, err
		}
		limit, err := a.integer("max_records", 0)
		if err != nil {
			return nil, err
		}
		overwrite, err := a.boolean("overwrite", false)
		if err != nil {
			return nil, err
		}
		list, err := a.boolean("list_conflicts", false)
		if err != nil {
			return nil, err
		}
		return replyWith(replyTransfer)(operator.Import(ctx, st, path, offset, int(limit), overwrite, list))
	}},
	// merge copies another database's records in, a slice of programs at
	// a time (core/operator/merge.go); after is the previous slice's next.
	"merge": {true, []string{"source_path", "after", "max_records", "overwrite", "allow_cpu_mismatch", "list_conflicts"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		src, err := a.str("source_path")
		if err != nil {
			return nil, err
		}
		var cursor *operator.MergeCursor
		if v, ok := a.get("after"); ok && v != nil {
			o, isObj := dict(v)
			name, _ := o.Get("program_name")
			hash, _ := o.Get("program_hash")
			ns, nok := name.(string)
			hs, hok := hash.(string)
			if !isObj || !nok || !hok {
				return nil, a.typeErr("after", "a {program_name, program_hash} dict or None", v)
			}
			cursor = &operator.MergeCursor{Name: ns, Hash: hs}
		}
		limit, err := a.integer("max_records", 0)
		if err != nil {
			return nil, err
		}
		flags := map[string]bool{}
		for _, f := range []string{"overwrite", "allow_cpu_mismatch", "list_conflicts"} {
			if flags[f], err = a.boolean(f, false); err != nil {
				return nil, err
			}
		}
		return replyWith(replyMerge)(operator.Merge(ctx, st, src, cursor, int(limit), flags["overwrite"], flags["allow_cpu_mismatch"], flags["list_conflicts"]))
	}},
	"config_import": {true, []string{"namespace", "path", "overwrite", "once"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		ns, err := a.namespace()
		if err != nil {
			return nil, err
		}
		path, err := a.str("path")
		if err != nil {
			return nil, err
		}
		overwrite, err := a.boolean("overwrite", false)
		if err != nil {
			return nil, err
		}
		once, err := a.boolean("once", false)
		if err != nil {
			return nil, err
		}
		return replyWith(replyConfigImport)(st.ConfigImportJSON(ctx, ns, path, once, overwrite))
	}},
	"config_export": {true, []string{"namespace", "output_path"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		ns, err := a.namespace()
		if err != nil {
			return nil, err
		}
		path, err := a.str("output_path")
		if err != nil {
			return nil, err
		}
		out, n, err := st.ConfigExportJSON(ctx, ns, path)
		if err != nil {
			return nil, err
		}
		return replyConfigExport(out, n), nil
	}},
	"program_stats": {true, noParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		return replyEach(replyProgramStat)(st.ProgramStats(ctx))
	}},
	"writes_allowed": {true, noParams, func(_ context.Context, st *core.Store, a *args) (any, error) {
		return st.WritesAllowed(), nil
	}},
	"cpu_model": {true, noParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		return optional(st.CPUModel(ctx))
	}},
	"slurm_cpus": {true, noParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		return optional(st.SlurmCPUs(ctx))
	}},
}

// programArgs reads program_name, program_source_code and, when withSched,
// tiralib_schedule_string.
func programArgs(a *args, withSched bool) (name, src, sched string, err error) {
	if name, err = a.str("program_name"); err != nil {
		return
	}
	if src, err = a.str("program_source_code"); err != nil {
		return
	}
	if withSched {
		sched, err = a.str("tiralib_schedule_string")
	}
	return
}

// readArgs is programArgs for the reads: exactly one of
// program_source_code and program_hash.
func readArgs(a *args, withSched bool) (name string, prog core.ProgramRef, sched string, err error) {
	if _, ok := a.get("program_hash"); !ok {
		name, prog.Source, sched, err = programArgs(a, withSched)
		return
	}
	if _, ok := a.get("program_source_code"); ok {
		err = &core.Error{Kind: core.KindType, Message: fmt.Sprintf("%s(): give program_source_code or program_hash, not both", a.method)}
		return
	}
	if name, err = a.str("program_name"); err != nil {
		return
	}
	if prog.Hash, err = a.str("program_hash"); err != nil {
		return
	}
	prog.ByHash = true
	if withSched {
		sched, err = a.str("tiralib_schedule_string")
	}
	return
}

func optional(p *string, err error) (any, error) {
	if p == nil || err != nil {
		return nil, err
	}
	return *p, nil
}

// lockArgs are the database path and stale timeout of lock_status and
// lock_break.
func lockArgs(a *args) (path string, opts core.Options, err error) {
	if path, err = a.str("db_path"); err != nil {
		return
	}
	opts.StaleLockTimeout, err = a.seconds("stale_lock_timeout")
	return
}

// configArgs are a config entry's namespace and the three parts of its
// key.
func configArgs(a *args) (namespace, device, opID, callKey string, err error) {
	if namespace, err = a.namespace(); err != nil {
		return
	}
	if device, err = a.str("device"); err != nil {
		return
	}
	if opID, err = a.str("op_id"); err != nil {
		return
	}
	callKey, err = a.str("call_key")
	return
}

// claimOptions reads lease (seconds, null: the default) and wait.
func claimOptions(a *args, waitDefault bool) (core.ClaimOptions, error) {
	var o core.ClaimOptions
	d, err := a.seconds("lease")
	if err != nil {
		return o, err
	}
	if d != nil {
		if *d <= 0 {
			return o, &core.Error{Kind: core.KindValue, Message: fmt.Sprintf("%s(): lease must be a positive number of seconds, got %g", a.method, d.Seconds())}
		}
		o.Lease = *d
	}
	if o.Wait, err = a.boolean("wait", waitDefault); err != nil {
		return o, err
	}
	o.Remeasure, err = a.boolean("remeasure_unstable", false)
	return o, err
}

// heldClaim is the store's claim named by the token argument; a claim that
// has ended (recorded, released, or its store closed) is a ValueError.
func heldClaim(st *core.Store, a *args) (*core.Claim, error) {
	tok, err := a.str("token")
	if err != nil {
		return nil, err
	}
	if c := st.HeldClaim(tok); c != nil {
		return c, nil
	}
	if a.method == "claim_release" {
		return nil, nil // releasing an ended claim does nothing
	}
	return nil, &core.Error{Kind: core.KindValue, Message: fmt.Sprintf("%s(): no claim %s is held by this store (it was recorded or released)", a.method, tok)}
}
