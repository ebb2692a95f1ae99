// Package dashboard follows a database while it is written and keeps what
// `tirastore dashboard` shows of it: per program the best time found so
// far, its counts and the spread of the repeated times of its best
// schedules, and the fleet's throughput by host, user and source project.
//
// A Board reads the records table through core.Store.RecordsAfter, a chunk
// of tuning.DashboardChunkRows rows per read (one hold of the lock, less
// than a lookup's load of a program holds at most), and folds each chunk into
// aggregates that are incremental: a refresh reads only the rows inserted
// since its cursor, and what a page asks for is answered from memory,
// downsampled to a few thousand points whatever the number of records.
// A record's time is the median of its finite execution times
// (RecordTime), as in `tirastore plot`, whose data SearchOf computes.
//
// Every aggregate is kept per program and per combination of host, user
// and source project that wrote records of it (a part), in forms that
// merge exactly (counts, minimums, the steps of the best so far, the
// fastest records, aligned buckets of the scatter): a Filter (a host, a
// user, a project, or any) merges the parts it selects, and no filter
// merges them all.
//
// What a board does not see: a delete, and an overwrite of a record it
// has already read (the row keeps its place); a new board (a restart of
// the dashboard) reads them.
package dashboard

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/timing"
	"github.com/tirastore/tirastore/core/tuning"
)

const (
	// MaxPoints bounds the points of a program's scatter: buckets of
	// consecutive records, each drawn as its fastest and slowest record,
	// doubled in width whenever there are more.
	MaxPoints = 2000
	// TopSchedules is how many of a program's fastest schedules the
	// spread of repeated times is kept for.
	TopSchedules = 10
	// FleetBins is the most time bins of a throughput series (of a width
	// from fleetSteps), and FleetNames the most hosts (users, projects)
	// shown apart; the others are summed as Others.
	FleetBins  = 120
	FleetNames = 8
	// serverWindow: on a database server rowids are taken at insert and
	// committed in any order, so a row may appear behind the cursor; each
	// refresh reads this many rowids behind it again and skips the rows
	// already folded in.
	serverWindow = 1024
)

// Others names the sum of the series not shown apart.
const Others = "(others)"

// Board is the aggregated view of one database. Its methods are safe for
// concurrent use: a refresh reads the database without holding the
// board's mutex, so that pages are answered while it reads.
type Board struct {
	refreshing sync.Mutex // one refresh at a time

	mu                               sync.Mutex
	cursor                           int64
	version                          int64 // counts the refreshes that added records
	records, legal, illegal, untimed int64
	programs                         map[string]*program
	combos                           []Combo           // by id: the host, user and project of records seen
	comboID                          map[Combo]int32   // their ids
	comboRecords                     []int64           // records per combo id
	fleet                            []map[int64]int64 // per combo id: minute -> records
	caughtUp                         bool
	seen                             map[int64]struct{} // server: the rowids of the window behind the cursor
}

// Combo is the host, user and source project of a record.
type Combo struct {
	Host, User, Project string
}

// of is the combo's name in dimension dim (0 host, 1 user, 2 project).
func (c Combo) of(dim int) string {
	switch dim {
	case 0:
		return c.Host
	case 1:
		return c.User
	}
	return c.Project
}

// Filter selects records by host, user and source project: a nil field
// selects any value ("" is a value: a record without a project).
type Filter struct {
	Host, User, Project *string
}

// Match reports whether the filter selects records of c.
func (f Filter) Match(c Combo) bool {
	return (f.Host == nil || *f.Host == c.Host) && (f.User == nil || *f.User == c.User) &&
		(f.Project == nil || *f.Project == c.Project)
}

// New returns an empty board; Refresh fills it.
func New() *Board {
	return &Board{programs: map[string]*program{}, comboID: map[Combo]int32{}}
}

// Refresh reads the records inserted since the last refresh, up to about
// maxRows of them (<= 0: until the end), a bounded chunk per read, and
// folds them in. It reports how many it added and whether it reached the
// end of the table.
func (b *Board) Refresh(ctx context.Context, st *core.Store, maxRows int) (added int, caughtUp bool, err error) {
	b.refreshing.Lock()
	defer b.refreshing.Unlock()
	server := st.IsServer()
	b.mu.Lock()
	after := b.cursor
	b.mu.Unlock()
	if server {
		after = max(after-serverWindow, 0)
	}
	chunk := tuning.DashboardChunkRows
	for {
		recs, err := st.RecordsAfter(ctx, after, chunk)
		if err != nil {
			return added, false, err
		}
		b.mu.Lock()
		n := b.fold(recs, server)
		caughtUp = len(recs) < chunk
		b.caughtUp = caughtUp
		if n > 0 {
			b.version++
		}
		b.mu.Unlock()
		added += n
		if len(recs) > 0 {
			after = recs[len(recs)-1].Seq
		}
		if caughtUp || maxRows > 0 && added >= maxRows {
			return added, caughtUp, nil
		}
	}
}

// fold adds recs (in Seq order) to the aggregates and returns how many
// were new. b.mu is held.
func (b *Board) fold(recs []storage.SeqRecord, server bool) int {
	n := 0
	for i := range recs {
		r := &recs[i]
		if r.Seq <= b.cursor {
			if !server {
				continue
			}
			if _, ok := b.seen[r.Seq]; ok || r.Seq <= b.cursor-serverWindow {
				continue
			}
		}
		if server {
			if b.seen == nil {
				b.seen = map[int64]struct{}{}
			}
			b.seen[r.Seq] = struct{}{}
		}
		b.cursor = max(b.cursor, r.Seq)
		b.add(&r.Record)
		n++
	}
	if server && n > 0 {
		for s := range b.seen {
			if s <= b.cursor-serverWindow {
				delete(b.seen, s)
			}
		}
	}
	return n
}

// add folds one record in; b.version+1 is the version it appears in.
func (b *Board) add(r *storage.Record) {
	p := b.programs[r.ProgramHash]
	if p == nil {
		p = &program{hash: r.ProgramHash, name: r.ProgramName, parts: map[int32]*part{}}
		b.programs[r.ProgramHash] = p
	}
	c := Combo{Host: r.Hostname, User: r.Username, Project: r.SourceProject}
	id, ok := b.comboID[c]
	if !ok {
		id = int32(len(b.combos))
		b.comboID[c] = id
		b.combos = append(b.combos, c)
		b.comboRecords = append(b.comboRecords, 0)
		b.fleet = append(b.fleet, map[int64]int64{})
	}
	b.comboRecords[id]++
	b.records++
	legal, times := outcome(r)
	t, timed := RecordTime(times)
	switch {
	case !legal:
		b.illegal++
	case !timed:
		b.legal++
		b.untimed++
	default:
		b.legal++
	}
	p.add(id, r, legal, timed, t, times, b.version+1)
	if m, ok := minuteOf(r.CreationDate); ok {
		b.fleet[id][m]++
	}
}

// outcome reads a record's result as lookups do (core.ParseResult's
// rules, through core.ResultOf): whether it is legal and its times, none
// for a censored result (a timeout's limit is a bound, not a time).
func outcome(r *storage.Record) (legal bool, times []float64) {
	res, err := core.ResultOf(r)
	if err != nil {
		return false, nil
	}
	return res.IsLegal, timesOf(res)
}

// timesOf is r's times, none when r is censored.
func timesOf(r *core.Result) []float64 {
	if r.Censored != "" {
		return nil
	}
	return r.ExecutionTimes
}

// RecordTime is a record's time: the median of the finite numbers among
// its execution times (false if none), core/timing's. The board and
// `tirastore plot` (SearchOf) take it so, robust to one slow or lucky run.
func RecordTime(times []float64) (float64, bool) {
	st, ok := timing.Summarize(times)
	return st.Median, ok
}

// minuteOf is the Unix minute of a record's creation date: the engine's
// and the original's ISO 8601 with an offset, or a date without one (a
// naive local time, as some writers stored), read as UTC.
func minuteOf(date string) (int64, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, date); err == nil {
			return t.Unix() / 60, true
		}
	}
	return 0, false
}

// program is the aggregate of one program (one source version): its
// parts, one per combo that wrote records of it.
type program struct {
	hash, name string
	records    int64 // positions: a record's is the count before it
	parts      map[int32]*part
	changed    int64 // the board version of its last change
}

// part is what one combo wrote of a program. Positions (X) are among all
// the program's records, so that the parts of a filter merge in order.
type part struct {
	records, legal, illegal, untimed int64
	last                             string // creation date of its newest record
	best                             float64
	bestSchedule                     string
	steps                            []Point // the best-so-far curve: each improvement
	scatter                          downsample
	top                              []Spread // its TopSchedules fastest records, fastest first
}

func (p *program) add(combo int32, r *storage.Record, legal, timed bool, t float64, times []float64, version int64) {
	x := p.records
	p.records++
	p.changed = version
	q := p.parts[combo]
	if q == nil {
		q = &part{best: math.Inf(1), scatter: downsample{width: 1}}
		p.parts[combo] = q
	}
	q.records++
	if r.CreationDate > q.last {
		q.last = r.CreationDate
	}
	switch {
	case !legal:
		q.illegal++
		return
	case !timed:
		q.legal++
		q.untimed++
		return
	}
	q.legal++
	q.scatter.add(x, t)
	if t < q.best {
		q.best, q.bestSchedule = t, r.Schedule
		q.steps = append(q.steps, Point{X: x, Y: t})
	}
	if len(q.top) < TopSchedules || t < q.top[len(q.top)-1].Time {
		s := spreadOf(r, t, times)
		s.x = x
		i := sort.Search(len(q.top), func(i int) bool { return q.top[i].Time > t })
		q.top = slices.Insert(q.top, i, s)
		if len(q.top) > TopSchedules {
			q.top = q.top[:TopSchedules]
		}
	}
}

// Point is a point of a curve: X the record's position among its
// program's records in insertion order (from 0), Y its time.
type Point struct {
	X int64
	Y float64
}

// downsample keeps, per bucket of width consecutive positions (width a
// power of two, buckets aligned on its multiples), the fastest and the
// slowest record: only the buckets that have records, at most
// MaxPoints/2 of them, merged in pairs (width doubled) when there would
// be more. Aligned buckets of powers of two merge exactly: a bucket of a
// width holds whole buckets of every smaller width.
type downsample struct {
	width   int64
	buckets []bucket // by index, ascending
}

type bucket struct {
	index  int64 // positions index*width to (index+1)*width-1
	lo, hi Point
	n      int
}

// merge adds c's records to b.
func (b *bucket) merge(c bucket) {
	if b.n == 0 || c.lo.Y < b.lo.Y || c.lo.Y == b.lo.Y && c.lo.X < b.lo.X {
		b.lo = c.lo
	}
	if b.n == 0 || c.hi.Y > b.hi.Y || c.hi.Y == b.hi.Y && c.hi.X < b.hi.X {
		b.hi = c.hi
	}
	b.n += c.n
}

// add adds the record at x (greater than every x added before).
func (d *downsample) add(x int64, y float64) {
	p := Point{x, y}
	d.push(bucket{index: x / d.width, lo: p, hi: p, n: 1}, d.width)
}

// push adds c, a bucket of width w (a power of two, at most d.width), at
// or after the last bucket.
func (d *downsample) push(c bucket, w int64) {
	c.index /= d.width / w
	if n := len(d.buckets); n > 0 && d.buckets[n-1].index == c.index {
		d.buckets[n-1].merge(c)
		return
	}
	d.buckets = append(d.buckets, c)
	for len(d.buckets) > MaxPoints/2 {
		d.halve()
	}
}

// halve doubles the width: buckets merged in pairs.
func (d *downsample) halve() {
	out := d.buckets[:0]
	for _, b := range d.buckets {
		b.index /= 2
		if n := len(out); n > 0 && out[n-1].index == b.index {
			out[n-1].merge(b)
		} else {
			out = append(out, b)
		}
	}
	d.buckets = out
	d.width *= 2
}

// mergeDownsamples is the downsample of the union of ds' records (of
// disjoint positions), at the widest of their widths or wider.
func mergeDownsamples(ds []*downsample) downsample {
	if len(ds) == 1 {
		return downsample{width: ds[0].width, buckets: slices.Clone(ds[0].buckets)}
	}
	width, n := int64(1), 0
	for _, d := range ds {
		width, n = max(width, d.width), n+len(d.buckets)
	}
	all := make([]bucket, 0, n)
	for _, d := range ds { // each bucket lies within one of the common width
		for _, b := range d.buckets {
			b.index /= width / d.width
			all = append(all, b)
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].index < all[j].index })
	out := downsample{width: width}
	for _, b := range all {
		out.push(b, width)
	}
	return out
}

// points are the kept records in position order.
func (d *downsample) points() []Point {
	out := make([]Point, 0, 2*len(d.buckets))
	for _, b := range d.buckets {
		switch {
		case b.n == 0:
		case b.lo.X == b.hi.X:
			out = append(out, b.lo)
		case b.lo.X < b.hi.X:
			out = append(out, b.lo, b.hi)
		default:
			out = append(out, b.hi, b.lo)
		}
	}
	return out
}

// Spread is one of a program's fastest records and the spread of its
// repeated times.
type Spread struct {
	Schedule, Hostname, CreationDate string
	Time                             float64 // the median: the record's time
	Count                            int     // finite times
	Min, Q1, Q3, Max                 float64
	MAD                              float64 // median absolute deviation (core/timing)
	// Relative is core/timing's spread (PolyBench's rule); Stable whether
	// it meets the store's noise policy (set by Program).
	Relative float64
	Stable   bool
	x        int64 // its position: equal times in insertion order
}

func spreadOf(r *storage.Record, t float64, times []float64) Spread {
	xs := make([]float64, 0, len(times))
	for _, v := range times {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			xs = append(xs, v)
		}
	}
	sort.Float64s(xs)
	q := func(f float64) float64 { // linear interpolation between closest ranks
		pos := f * float64(len(xs)-1)
		lo := int(math.Floor(pos))
		hi := min(lo+1, len(xs)-1)
		return xs[lo] + (xs[hi]-xs[lo])*(pos-float64(lo))
	}
	st, _ := timing.Summarize(xs)
	return Spread{Schedule: r.Schedule, Hostname: r.Hostname, CreationDate: r.CreationDate, Time: t,
		Count: len(xs), Min: xs[0], Q1: q(0.25), Q3: q(0.75), Max: xs[len(xs)-1], MAD: st.MAD, Relative: st.Spread}
}

// ProgramRow is a program's line of the overview: of the records a
// filter selects.
type ProgramRow struct {
	Hash, Name                       string
	Records, Legal, Illegal, Untimed int64
	Best                             float64 // NaN without a timed record
	BestSchedule, LastRecord         string
	Changed                          int64
}

// Overview is the page's summary.
type Overview struct {
	// Version names this state: a page asks again with since = Version
	// and gets only the programs changed since.
	Version, Cursor                  int64
	CaughtUp                         bool
	Records, Legal, Illegal, Untimed int64 // of the whole database
	// Matched is the records the filter selects, ProgramCount the
	// programs that have some.
	Matched      int64
	ProgramCount int
	// Programs are those changed since the version asked for (all for
	// since 0) that have records the filter selects, by name then hash.
	Programs []ProgramRow
	// Fleet is the throughput by host, user and source project, of the
	// records the filter selects.
	Fleet [3]Series
	// Choices are, per dimension, every name of the database's records
	// with its count, by name: what a filter can select.
	Choices [3][]NameCount
}

// NameCount is a host's (user's, project's) name and its records.
type NameCount struct {
	Name    string
	Records int64
}

// Series is the records per time bin of a few names: Start is the first
// bin's Unix time, Step its width in seconds (one of fleetSteps, bins
// aligned on its multiples since the epoch); Counts[i][j] is name i's
// records in bin j.
type Series struct {
	Start, Step int64
	Names       []string
	Counts      [][]int64
}

// Dimensions name the Fleet series in order.
var Dimensions = [3]string{"host", "user", "project"}

// selected is the ids of p's parts that f selects, in ascending order.
func (b *Board) selected(p *program, f Filter) []int32 {
	ids := make([]int32, 0, len(p.parts))
	for id := range p.parts {
		if f.Match(b.combos[id]) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// rowOf merges the counts of p's parts ids.
func rowOf(p *program, ids []int32) ProgramRow {
	r := ProgramRow{Hash: p.hash, Name: p.name, Best: math.NaN(), Changed: p.changed}
	bestX := int64(math.MaxInt64)
	for _, id := range ids {
		q := p.parts[id]
		r.Records, r.Legal, r.Illegal, r.Untimed = r.Records+q.records, r.Legal+q.legal, r.Illegal+q.illegal,
			r.Untimed+q.untimed
		if q.last > r.LastRecord {
			r.LastRecord = q.last
		}
		if n := len(q.steps); n > 0 {
			// The fastest; of equal times, the first recorded.
			if x := q.steps[n-1].X; math.IsNaN(r.Best) || q.best < r.Best || q.best == r.Best && x < bestX {
				r.Best, r.BestSchedule, bestX = q.best, q.bestSchedule, x
			}
		}
	}
	return r
}

// Overview returns the summary of the records f selects; since is the
// Version a page already has (0: none), so that only the programs changed
// since are listed.
func (b *Board) Overview(since int64, f Filter) *Overview {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := &Overview{Version: b.version, Cursor: b.cursor, CaughtUp: b.caughtUp, Records: b.records,
		Legal: b.legal, Illegal: b.illegal, Untimed: b.untimed, Programs: []ProgramRow{}}
	for _, p := range b.programs {
		ids := b.selected(p, f)
		if len(ids) == 0 {
			continue
		}
		o.ProgramCount++
		row := rowOf(p, ids)
		o.Matched += row.Records
		if p.changed > since {
			o.Programs = append(o.Programs, row)
		}
	}
	sort.Slice(o.Programs, func(i, j int) bool {
		a, c := o.Programs[i], o.Programs[j]
		return a.Name < c.Name || a.Name == c.Name && a.Hash < c.Hash
	})
	for dim := range Dimensions {
		o.Fleet[dim] = b.series(dim, f)
		o.Choices[dim] = b.choices(dim)
	}
	return o
}

// choices is every name of dimension dim with its records, by name.
func (b *Board) choices(dim int) []NameCount {
	counts := map[string]int64{}
	for id, c := range b.combos {
		counts[c.of(dim)] += b.comboRecords[id]
	}
	out := make([]NameCount, 0, len(counts))
	for name, n := range counts {
		out = append(out, NameCount{name, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// fleetSteps are the widths of a throughput bin, in minutes, that a
// series chooses from (the narrowest that needs at most FleetBins bins):
// widths a clock reads; past a week, whole weeks.
var fleetSteps = []int64{1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080}

// fleetStep is the bin width, in minutes, for records from minute first
// to minute last, and the first bin's minute (a multiple of it).
func fleetStep(first, last int64) (step, start int64) {
	fits := func(step int64) bool {
		start := floorDiv(first, step) * step
		return (last-start)/step+1 <= FleetBins
	}
	for _, step := range fleetSteps {
		if fits(step) {
			return step, floorDiv(first, step) * step
		}
	}
	week := fleetSteps[len(fleetSteps)-1]
	step = week * max((last-first+week*FleetBins-1)/(week*FleetBins), 1)
	for !fits(step) {
		step += week
	}
	return step, floorDiv(first, step) * step
}

// floorDiv is a/b rounded down (b > 0): dates before 1970 are negative minutes.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// series bins dimension dim's per-minute counts of the records f
// selects: FleetNames names with the most records apart, the others
// summed, over at most FleetBins bins.
func (b *Board) series(dim int, f Filter) Series {
	s := Series{Names: []string{}, Counts: [][]int64{}}
	totals := map[string]int64{}
	first, last := int64(math.MaxInt64), int64(math.MinInt64)
	var ids []int
	for id, c := range b.combos {
		if !f.Match(c) || len(b.fleet[id]) == 0 {
			continue
		}
		ids = append(ids, id)
		for m, n := range b.fleet[id] {
			totals[c.of(dim)] += n
			first, last = min(first, m), max(last, m)
		}
	}
	if len(totals) == 0 {
		return s
	}
	names := make([]string, 0, len(totals))
	for name := range totals {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		a, c := totals[names[i]], totals[names[j]]
		return a > c || a == c && names[i] < names[j]
	})
	rowOf := map[string]int{}
	for i, name := range names {
		if i == FleetNames && len(names) > FleetNames+1 {
			for _, rest := range names[i:] {
				rowOf[rest] = i
			}
			s.Names = append(s.Names, Others)
			break
		}
		rowOf[name] = i
		s.Names = append(s.Names, name)
	}
	step, start := fleetStep(first, last)
	bins := int((last-start)/step) + 1
	s.Start, s.Step = start*60, step*60
	s.Counts = make([][]int64, len(s.Names))
	for i := range s.Counts {
		s.Counts[i] = make([]int64, bins)
	}
	for _, id := range ids {
		row := s.Counts[rowOf[b.combos[id].of(dim)]]
		for m, n := range b.fleet[id] {
			row[(m-start)/step] += n
		}
	}
	return s
}

// ProgramView is what the page draws of one program: of the records a
// filter selects.
type ProgramView struct {
	ProgramRow
	// Steps is the best-so-far curve (each improvement); Scatter the
	// records' times, downsampled to at most MaxPoints points; Width the
	// number of consecutive records each pair of scatter points stands for.
	Steps, Scatter []Point
	Width          int64
	Top            []Spread
}

// Program returns the view of the program of hash, of the records f
// selects, or nil when the board has none of them; its fastest records are
// judged by policy.
func (b *Board) Program(hash string, f Filter, policy core.NoisePolicy) *ProgramView {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.programs[hash]
	if p == nil {
		return nil
	}
	ids := b.selected(p, f)
	if len(ids) == 0 {
		return nil
	}
	v := &ProgramView{ProgramRow: rowOf(p, ids), Steps: []Point{}, Top: []Spread{}}
	// Every improvement of the merge is one of its part's (a record
	// faster than all before it of the filter is faster than all before
	// it of its part): the running minimum of the parts' steps.
	ds := make([]*downsample, len(ids))
	var steps []Point
	for i, id := range ids {
		q := p.parts[id]
		steps = append(steps, q.steps...)
		v.Top = append(v.Top, q.top...)
		ds[i] = &q.scatter
	}
	slices.SortFunc(steps, func(a, c Point) int { return cmp.Compare(a.X, c.X) })
	for _, pt := range steps {
		if n := len(v.Steps); n == 0 || pt.Y < v.Steps[n-1].Y {
			v.Steps = append(v.Steps, pt)
		}
	}
	sort.SliceStable(v.Top, func(i, j int) bool {
		a, c := v.Top[i], v.Top[j]
		return a.Time < c.Time || a.Time == c.Time && a.x < c.x
	})
	v.Top = v.Top[:min(len(v.Top), TopSchedules)]
	for i := range v.Top {
		v.Top[i].Stable = !policy.Unstable(timing.Stats{Count: v.Top[i].Count, Spread: v.Top[i].Relative})
	}
	d := mergeDownsamples(ds)
	v.Scatter, v.Width = d.points(), d.width
	return v
}

// Search is every record of one program's source as `tirastore plot`
// draws it (no downsampling): positions are indexes among all its
// records in creation order, from 0.
type Search struct {
	// X and Y are the legal records with a time (RecordTime), Best the
	// running minimum of Y.
	X       []int64
	Y, Best []float64
	// IllegalX are the illegal records, UntimedX the legal ones without
	// a finite time (only other tools write such records).
	IllegalX, UntimedX []int64
}

// SearchOf computes the plot of a program's records, oldest first (as
// core.Store.GetProgramRecords returns them).
func SearchOf(recs []*core.Result) *Search {
	s := &Search{X: []int64{}, Y: []float64{}, Best: []float64{}, IllegalX: []int64{}, UntimedX: []int64{}}
	for i, r := range recs {
		x := int64(i)
		if !r.IsLegal {
			s.IllegalX = append(s.IllegalX, x)
			continue
		}
		t, ok := RecordTime(timesOf(r))
		if !ok {
			s.UntimedX = append(s.UntimedX, x)
			continue
		}
		best := t
		if n := len(s.Best); n > 0 {
			best = min(s.Best[n-1], t)
		}
		s.X, s.Y, s.Best = append(s.X, x), append(s.Y, t), append(s.Best, best)
	}
	return s
}
