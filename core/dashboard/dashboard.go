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
// What a board does not see: a delete, and an overwrite of a record it
// has already read (the row keeps its place); a new board (a restart of
// the dashboard) reads them.
package dashboard

import (
	"context"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/storage"
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
	// FleetBins is the most time bins of a throughput series, and
	// FleetNames the most hosts (users, projects) shown apart; the others
	// are summed as Others.
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
	fleet                            [3]map[string]map[int64]int64 // host, user, project -> minute -> records
	caughtUp                         bool
	seen                             map[int64]struct{} // server: the rowids of the window behind the cursor
}

// New returns an empty board; Refresh fills it.
func New() *Board {
	b := &Board{programs: map[string]*program{}}
	for i := range b.fleet {
		b.fleet[i] = map[string]map[int64]int64{}
	}
	return b
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
		p = &program{hash: r.ProgramHash, name: r.ProgramName, best: math.Inf(1), scatter: downsample{width: 1}}
		b.programs[r.ProgramHash] = p
	}
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
	p.add(r, legal, timed, t, times, b.version+1)
	if m, ok := minuteOf(r.CreationDate); ok {
		for i, name := range [3]string{r.Hostname, r.Username, r.SourceProject} {
			byMinute := b.fleet[i][name]
			if byMinute == nil {
				byMinute = map[int64]int64{}
				b.fleet[i][name] = byMinute
			}
			byMinute[m]++
		}
	}
}

// outcome reads a record's result as lookups do (core.ParseResult's
// rules, through core.ResultOf): whether it is legal and its times.
func outcome(r *storage.Record) (legal bool, times []float64) {
	res, err := core.ResultOf(r)
	if err != nil {
		return false, nil
	}
	return res.IsLegal, res.ExecutionTimes
}

// RecordTime is a record's time: the median of the finite numbers among
// its execution times (false if none). The board and `tirastore plot`
// (SearchOf) take it so, robust to one slow or lucky run.
func RecordTime(times []float64) (float64, bool) {
	xs := make([]float64, 0, len(times))
	for _, t := range times {
		if !math.IsNaN(t) && !math.IsInf(t, 0) {
			xs = append(xs, t)
		}
	}
	if len(xs) == 0 {
		return 0, false
	}
	sort.Float64s(xs)
	if n := len(xs); n%2 == 1 {
		return xs[n/2], true
	} else {
		return (xs[n/2-1] + xs[n/2]) / 2, true
	}
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

// program is the aggregate of one program (one source version).
type program struct {
	hash, name                       string
	records, legal, illegal, untimed int64
	last                             string // creation date of its newest record
	best                             float64
	bestSchedule                     string
	steps                            []Point // the best-so-far curve: each improvement
	scatter                          downsample
	top                              []Spread // its TopSchedules fastest records, fastest first
	changed                          int64    // the board version of its last change
}

func (p *program) add(r *storage.Record, legal, timed bool, t float64, times []float64, version int64) {
	x := p.records
	p.records++
	p.changed = version
	if r.CreationDate > p.last {
		p.last = r.CreationDate
	}
	switch {
	case !legal:
		p.illegal++
		return
	case !timed:
		p.legal++
		p.untimed++
		return
	}
	p.legal++
	p.scatter.add(x, t)
	if t < p.best {
		p.best, p.bestSchedule = t, r.Schedule
		p.steps = append(p.steps, Point{X: x, Y: t})
	}
	if len(p.top) < TopSchedules || t < p.top[len(p.top)-1].Time {
		s := spreadOf(r, t, times)
		i := sort.Search(len(p.top), func(i int) bool { return p.top[i].Time > t })
		p.top = slices.Insert(p.top, i, s)
		if len(p.top) > TopSchedules {
			p.top = p.top[:TopSchedules]
		}
	}
}

// Point is a point of a curve: X the record's position among its
// program's records in insertion order (from 0), Y its time.
type Point struct {
	X int64
	Y float64
}

// downsample keeps, per bucket of width consecutive positions, the
// fastest and the slowest record: at most MaxPoints/2 buckets, merged in
// pairs (width doubled) when there would be more.
type downsample struct {
	width   int64
	buckets []bucket
}

type bucket struct {
	lo, hi Point
	n      int
}

func (d *downsample) add(x int64, y float64) {
	i := int(x / d.width)
	for i >= MaxPoints/2 {
		d.halve()
		i = int(x / d.width)
	}
	for len(d.buckets) <= i {
		d.buckets = append(d.buckets, bucket{})
	}
	b := &d.buckets[i]
	p := Point{x, y}
	if b.n == 0 || y < b.lo.Y {
		b.lo = p
	}
	if b.n == 0 || y > b.hi.Y {
		b.hi = p
	}
	b.n++
}

// halve merges the buckets in pairs.
func (d *downsample) halve() {
	out := d.buckets[:0]
	for i := 0; i < len(d.buckets); i += 2 {
		b := d.buckets[i]
		if i+1 < len(d.buckets) {
			c := d.buckets[i+1]
			switch {
			case b.n == 0:
				b = c
			case c.n > 0:
				if c.lo.Y < b.lo.Y {
					b.lo = c.lo
				}
				if c.hi.Y > b.hi.Y {
					b.hi = c.hi
				}
				b.n += c.n
			}
		}
		out = append(out, b)
	}
	d.buckets = out
	d.width *= 2
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
	Runs                             int     // finite times
	Min, Q1, Q3, Max                 float64
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
	return Spread{Schedule: r.Schedule, Hostname: r.Hostname, CreationDate: r.CreationDate, Time: t,
		Runs: len(xs), Min: xs[0], Q1: q(0.25), Q3: q(0.75), Max: xs[len(xs)-1]}
}

// ProgramRow is a program's line of the overview.
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
	Records, Legal, Illegal, Untimed int64
	ProgramCount                     int
	// Programs are those changed since the version asked for (all for
	// since 0), by name then hash.
	Programs []ProgramRow
	// Fleet is the throughput by host, user and source project.
	Fleet [3]Series
}

// Series is the records per time bin of a few names: Start is the first
// bin's Unix time, Step its width in seconds; Counts[i][j] is name i's
// records in bin j.
type Series struct {
	Start, Step int64
	Names       []string
	Counts      [][]int64
}

// Dimensions name the Fleet series in order.
var Dimensions = [3]string{"host", "user", "project"}

// Overview returns the summary; since is the Version a page already has
// (0: none), so that only the programs changed since are listed.
func (b *Board) Overview(since int64) *Overview {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := &Overview{Version: b.version, Cursor: b.cursor, CaughtUp: b.caughtUp, Records: b.records,
		Legal: b.legal, Illegal: b.illegal, Untimed: b.untimed, ProgramCount: len(b.programs),
		Programs: []ProgramRow{}}
	for _, p := range b.programs {
		if p.changed <= since {
			continue
		}
		best := p.best
		if math.IsInf(best, 1) {
			best = math.NaN()
		}
		o.Programs = append(o.Programs, ProgramRow{Hash: p.hash, Name: p.name, Records: p.records, Legal: p.legal,
			Illegal: p.illegal, Untimed: p.untimed, Best: best, BestSchedule: p.bestSchedule, LastRecord: p.last,
			Changed: p.changed})
	}
	sort.Slice(o.Programs, func(i, j int) bool {
		a, c := o.Programs[i], o.Programs[j]
		return a.Name < c.Name || a.Name == c.Name && a.Hash < c.Hash
	})
	for i := range b.fleet {
		o.Fleet[i] = series(b.fleet[i])
	}
	return o
}

// series bins a dimension's per-minute counts: FleetNames names with the
// most records apart, the others summed, over at most FleetBins bins.
func series(byName map[string]map[int64]int64) Series {
	type total struct {
		name string
		n    int64
	}
	var totals []total
	first, last := int64(math.MaxInt64), int64(math.MinInt64)
	for name, mins := range byName {
		t := total{name: name}
		for m, n := range mins {
			t.n += n
			first, last = min(first, m), max(last, m)
		}
		totals = append(totals, t)
	}
	s := Series{Names: []string{}, Counts: [][]int64{}}
	if len(totals) == 0 {
		return s
	}
	sort.Slice(totals, func(i, j int) bool {
		return totals[i].n > totals[j].n || totals[i].n == totals[j].n && totals[i].name < totals[j].name
	})
	stepMin := max((last-first+1+FleetBins-1)/FleetBins, 1)
	bins := int((last-first)/stepMin) + 1
	s.Start, s.Step = first*60, stepMin*60
	row := func(names []string) []int64 {
		c := make([]int64, bins)
		for _, name := range names {
			for m, n := range byName[name] {
				c[(m-first)/stepMin] += n
			}
		}
		return c
	}
	for i, t := range totals {
		if i == FleetNames && len(totals) > FleetNames+1 {
			rest := make([]string, 0, len(totals)-i)
			for _, u := range totals[i:] {
				rest = append(rest, u.name)
			}
			s.Names = append(s.Names, Others)
			s.Counts = append(s.Counts, row(rest))
			break
		}
		s.Names = append(s.Names, t.name)
		s.Counts = append(s.Counts, row([]string{t.name}))
	}
	return s
}

// ProgramView is what the page draws of one program.
type ProgramView struct {
	ProgramRow
	// Steps is the best-so-far curve (each improvement); Scatter the
	// records' times, downsampled to at most MaxPoints points; Width the
	// number of consecutive records each pair of scatter points stands for.
	Steps, Scatter []Point
	Width          int64
	Top            []Spread
}

// Program returns the view of the program of hash, or nil when the board
// has no record of it.
func (b *Board) Program(hash string) *ProgramView {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.programs[hash]
	if p == nil {
		return nil
	}
	best := p.best
	if math.IsInf(best, 1) {
		best = math.NaN()
	}
	return &ProgramView{
		ProgramRow: ProgramRow{Hash: p.hash, Name: p.name, Records: p.records, Legal: p.legal, Illegal: p.illegal,
			Untimed: p.untimed, Best: best, BestSchedule: p.bestSchedule, LastRecord: p.last, Changed: p.changed},
		Steps: slices.Clone(p.steps), Scatter: p.scatter.points(), Width: p.scatter.width,
		Top: slices.Clone(p.top),
	}
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
		t, ok := RecordTime(r.ExecutionTimes)
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
