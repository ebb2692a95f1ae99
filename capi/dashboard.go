package main

import (
	"context"
	"math"
	"sync"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/dashboard"
	"github.com/tirastore/tirastore/core/operator"
	"github.com/tirastore/tirastore/core/pyjson"
)

// The dashboard's board of a store (core/dashboard): made by the store's
// first dashboard call, kept here beside the store's handle, and dropped
// with it by tirastore_close.
var boards = struct {
	sync.Mutex
	of map[*core.Store]*dashboard.Board
}{of: map[*core.Store]*dashboard.Board{}}

// boardOf returns the store's board, made on first use.
func boardOf(st *core.Store) *dashboard.Board {
	boards.Lock()
	defer boards.Unlock()
	b := boards.of[st]
	if b == nil {
		b = dashboard.New()
		boards.of[st] = b
	}
	return b
}

// dropBoard forgets the board of a store being closed.
func dropBoard(st *core.Store) {
	boards.Lock()
	delete(boards.of, st)
	boards.Unlock()
}

// dashboardMethods: dashboard_refresh reads what is new (at most about
// max_rows records; 0: up to the end), dashboard_overview answers the
// summary (only the programs changed since the version since), and
// dashboard_program one program's curves (null when unknown); both of
// the records of a host, user and project (each absent or null: any).
var dashboardMethods = map[string]method{
	"dashboard_refresh": {true, []string{"max_rows"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		limit, err := a.integer("max_rows", 0)
		if err != nil {
			return nil, err
		}
		added, done, err := boardOf(st).Refresh(ctx, st, int(limit))
		if err != nil {
			return nil, err
		}
		o := pyjson.NewObjectCap(2)
		o.Set("added", added)
		o.Set("caught_up", done)
		return o, nil
	}},
	"dashboard_overview": {true, []string{"since", "host", "user", "project"}, func(_ context.Context, st *core.Store, a *args) (any, error) {
		since, err := a.integer("since", 0)
		if err != nil {
			return nil, err
		}
		f, err := boardFilter(a)
		if err != nil {
			return nil, err
		}
		return replyOverview(boardOf(st).Overview(since, f)), nil
	}},
	"dashboard_program": {true, []string{"program_hash", "host", "user", "project"}, func(_ context.Context, st *core.Store, a *args) (any, error) {
		hash, err := a.str("program_hash")
		if err != nil {
			return nil, err
		}
		f, err := boardFilter(a)
		if err != nil {
			return nil, err
		}
		if v := boardOf(st).Program(hash, f, st.NoisePolicy()); v != nil {
			return replyProgramView(v), nil
		}
		return nil, nil
	}},
	// program_series is the data of `tirastore plot` for one source of a
	// program: every record, each one's time taken as the board takes it.
	"program_series": {true, []string{"program_name", "program_source_code"}, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		name, src, _, err := programArgs(a, false)
		if err != nil {
			return nil, err
		}
		recs, err := st.GetProgramRecords(ctx, name, src)
		if err != nil {
			return nil, err
		}
		s := dashboard.SearchOf(recs)
		o := pyjson.NewObjectCap(5)
		o.Set("x", ints(s.X))
		o.Set("y", s.Y)
		o.Set("best", s.Best)
		o.Set("illegal_x", ints(s.IllegalX))
		o.Set("untimed_x", ints(s.UntimedX))
		return o, nil
	}},
	// last_check is the summary the last `tirastore check` left in the
	// database (null: none).
	"last_check": {true, noParams, func(ctx context.Context, st *core.Store, a *args) (any, error) {
		return replyWith(replyCheckSummary)(operator.LastCheck(ctx, st))
	}},
}

// boardFilter is the host, user and project arguments: each a str, or
// absent or null for any ("" is a value: records without a project).
func boardFilter(a *args) (dashboard.Filter, error) {
	var f dashboard.Filter
	for _, dim := range []struct {
		name string
		to   **string
	}{{"host", &f.Host}, {"user", &f.User}, {"project", &f.Project}} {
		v, ok := a.get(dim.name)
		if !ok || v == nil {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return f, a.typeErr(dim.name, "str or None", v)
		}
		*dim.to = &s
	}
	return f, nil
}

func init() {
	for name, m := range dashboardMethods {
		methods[name] = m
	}
}

// finiteOrNull is JSON null for a NaN or an infinity (the page's JSON.parse
// reads neither token), else x.
func finiteOrNull(x float64) any {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return x
}

func replyProgramRow(p *dashboard.ProgramRow) *pyjson.Object {
	o := pyjson.NewObjectCap(14)
	o.Set("program_hash", p.Hash)
	o.Set("program_name", p.Name)
	o.Set("records", p.Records)
	o.Set("legal", p.Legal)
	o.Set("illegal", p.Illegal)
	o.Set("untimed", p.Untimed)
	o.Set("best", finiteOrNull(p.Best))
	o.Set("best_schedule", nullIfEmpty(p.BestSchedule))
	o.Set("last_record", nullIfEmpty(p.LastRecord))
	o.Set("changed", p.Changed)
	return o
}

func replyOverview(ov *dashboard.Overview) any {
	o := pyjson.NewObjectCap(14)
	o.Set("version", ov.Version)
	o.Set("cursor", ov.Cursor)
	o.Set("caught_up", ov.CaughtUp)
	o.Set("records", ov.Records)
	o.Set("legal", ov.Legal)
	o.Set("illegal", ov.Illegal)
	o.Set("untimed", ov.Untimed)
	o.Set("matched", ov.Matched)
	o.Set("program_count", ov.ProgramCount)
	progs := make([]*pyjson.Object, len(ov.Programs))
	for i := range ov.Programs {
		progs[i] = replyProgramRow(&ov.Programs[i])
	}
	o.Set("programs", progs)
	fleet := pyjson.NewObjectCap(3)
	for i, dim := range dashboard.Dimensions {
		s := ov.Fleet[i]
		so := pyjson.NewObjectCap(4)
		so.Set("start", s.Start)
		so.Set("step", s.Step)
		so.Set("names", s.Names)
		counts := make([]any, len(s.Counts))
		for j, c := range s.Counts {
			counts[j] = ints(c)
		}
		so.Set("counts", counts)
		fleet.Set(dim, so)
	}
	o.Set("fleet", fleet)
	choices := pyjson.NewObjectCap(3)
	for i, dim := range dashboard.Dimensions {
		list := make([]*pyjson.Object, len(ov.Choices[i]))
		for j, c := range ov.Choices[i] {
			e := pyjson.NewObjectCap(2)
			e.Set("name", c.Name)
			e.Set("records", c.Records)
			list[j] = e
		}
		choices.Set(dim, list)
	}
	o.Set("choices", choices)
	return o
}

// ints is a list of integers as the reply's encoder takes it.
func ints(xs []int64) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// points is a curve as two lists, x and y.
func points(ps []dashboard.Point) *pyjson.Object {
	xs, ys := make([]any, len(ps)), make([]float64, len(ps))
	for i, p := range ps {
		xs[i], ys[i] = p.X, p.Y
	}
	o := pyjson.NewObjectCap(2)
	o.Set("x", xs)
	o.Set("y", ys)
	return o
}

func replyProgramView(v *dashboard.ProgramView) any {
	o := replyProgramRow(&v.ProgramRow)
	o.Set("steps", points(v.Steps))
	o.Set("scatter", points(v.Scatter))
	o.Set("bucket_width", v.Width)
	top := make([]*pyjson.Object, len(v.Top))
	for i, s := range v.Top {
		t := pyjson.NewObjectCap(13)
		t.Set("schedule", s.Schedule)
		t.Set("hostname", s.Hostname)
		t.Set("creation_date", s.CreationDate)
		t.Set("time", s.Time)
		t.Set("count", s.Count)
		t.Set("min", s.Min)
		t.Set("mad", s.MAD)
		t.Set("q1", s.Q1)
		t.Set("q3", s.Q3)
		t.Set("max", s.Max)
		t.Set("spread", s.Relative)
		t.Set("stable", s.Stable)
		top[i] = t
	}
	o.Set("top", top)
	return o
}

// replyCheckSummary is the summary the last `tirastore check` left.
func replyCheckSummary(s *operator.CheckSummary) any {
	if s == nil {
		return nil
	}
	o := pyjson.NewObjectCap(8)
	o.Set("date", s.Date)
	o.Set("hostname", s.Hostname)
	o.Set("username", s.Username)
	o.Set("ok", s.OK)
	o.Set("problems", s.Problems)
	o.Set("first_problems", s.First)
	o.Set("repaired", s.Repaired)
	o.Set("records", s.Records)
	return o
}
