package dashboard

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/keys"
	"github.com/tirastore/tirastore/core/storage"
	"github.com/tirastore/tirastore/core/tuning"
)

var ctx = context.Background()

func open(t *testing.T) *core.Store {
	t.Helper()
	st, err := core.Open(ctx, filepath.Join(t.TempDir(), "cache.db"), core.Options{CPUModel: "Test CPU"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func record(t *testing.T, st *core.Store, prog string, ms ...core.Measurement) {
	t.Helper()
	if _, err := st.RecordMany(ctx, prog, "void "+prog+"() {}", ms, false); err != nil {
		t.Fatal(err)
	}
}

func timed(i int, times ...float64) core.Measurement {
	return core.Measurement{Schedule: fmt.Sprintf("U(L0,%d,comps=['c1'])", i+2), IsLegal: true, ExecutionTimes: core.Times(times...)}
}

// TestBoardAggregates: counts, the best-so-far steps, the spread of the
// best schedules, and a refresh that reads only what is new.
func TestBoardAggregates(t *testing.T) {
	st := open(t)
	record(t, st, "blur",
		timed(0, 0.5),
		core.Measurement{Schedule: "U(L0,3,comps=['c1'])", IsLegal: false},
		timed(2, 0.2, 0.3, 0.9), // median 0.3
		timed(3, 0.4),
	)
	record(t, st, "<script>", timed(0, 1))
	b := New()
	added, done, err := b.Refresh(ctx, st, 0)
	if err != nil || added != 5 || !done {
		t.Fatalf("refresh = %d, %v, %v; want 5, true", added, done, err)
	}
	o := b.Overview(0, Filter{})
	if o.Records != 5 || o.Legal != 4 || o.Illegal != 1 || o.Untimed != 0 || o.ProgramCount != 2 || len(o.Programs) != 2 {
		t.Fatalf("overview counts %+v", o)
	}
	if o.Programs[0].Name != "<script>" || o.Programs[1].Name != "blur" || o.Programs[1].Best != 0.3 {
		t.Fatalf("programs %+v", o.Programs)
	}
	hash := o.Programs[1].Hash
	v := b.Program(hash, Filter{}, core.DefaultNoisePolicy)
	if fmt.Sprint(v.Steps) != "[{0 0.5} {2 0.3}]" || v.BestSchedule != "U(L0,4,comps=['c1'])" {
		t.Fatalf("steps %v best %q", v.Steps, v.BestSchedule)
	}
	if len(v.Top) != 3 || v.Top[0].Time != 0.3 || v.Top[0].Min != 0.2 || v.Top[0].Max != 0.9 || v.Top[0].Count != 3 ||
		math.Abs(v.Top[0].MAD-0.1) > 1e-9 ||
		v.Top[1].Time != 0.4 || v.Top[2].Time != 0.5 {
		t.Fatalf("top %+v", v.Top)
	}
	// 0.2, 0.3, 0.9: 93% around their mean, unstable by the default
	// policy, stable by one that allows 100%.
	if v.Top[0].Stable || math.Abs(v.Top[0].Relative-0.13/0.14) > 1e-9 {
		t.Fatalf("the fastest record's spread %g, stable %v", v.Top[0].Relative, v.Top[0].Stable)
	}
	if loose := b.Program(hash, Filter{}, core.NoisePolicy{MaxSpread: 1}); !loose.Top[0].Stable {
		t.Fatal("a 93% spread is unstable under a policy of 100%")
	}
	if f := o.Fleet[0]; len(f.Names) != 1 || f.Counts[0][len(f.Counts[0])-1] == 0 {
		t.Fatalf("fleet by host %+v", f)
	}

	// Nothing new: no change, no version; then one record of blur: only
	// blur is listed as changed since the version the page had.
	if added, _, _ := b.Refresh(ctx, st, 0); added != 0 || b.Overview(0, Filter{}).Version != o.Version {
		t.Fatalf("an idle refresh added %d", added)
	}
	record(t, st, "blur", timed(7, 0.1))
	if added, _, _ := b.Refresh(ctx, st, 0); added != 1 {
		t.Fatalf("refresh added %d, want 1", added)
	}
	o2 := b.Overview(o.Version, Filter{})
	if len(o2.Programs) != 1 || o2.Programs[0].Name != "blur" || o2.Programs[0].Best != 0.1 || o2.Records != 6 {
		t.Fatalf("incremental overview %+v", o2)
	}
	if math.IsNaN(o2.Programs[0].Best) || b.Program("no such hash", Filter{}, core.DefaultNoisePolicy) != nil {
		t.Fatal("program lookups")
	}
}

// TestBoardChunks: a refresh reads tuning.DashboardChunkRows rows per read and
// stops after maxRows; the scatter stays bounded by MaxPoints and keeps the
// fastest record of every bucket.
func TestBoardChunks(t *testing.T) {
	st := open(t)
	n := 2*MaxPoints + 5 // more records than points, more than a chunk
	ms := make([]core.Measurement, n)
	for i := range ms {
		ms[i] = timed(i, 1+float64((i*7919)%n))
	}
	record(t, st, "big", ms...)
	b := New()
	added, done, err := b.Refresh(ctx, st, 1)
	if err != nil || added != tuning.DashboardChunkRows || done {
		t.Fatalf("bounded refresh = %d, %v, %v; want one chunk of %d", added, done, err, tuning.DashboardChunkRows)
	}
	if added, done, _ = b.Refresh(ctx, st, 0); added != n-tuning.DashboardChunkRows || !done {
		t.Fatalf("rest = %d, %v", added, done)
	}
	v := b.Program(b.Overview(0, Filter{}).Programs[0].Hash, Filter{}, core.DefaultNoisePolicy)
	if len(v.Scatter) > MaxPoints || v.Width < 2 {
		t.Fatalf("scatter of %d records: %d points, width %d", n, len(v.Scatter), v.Width)
	}
	lowest := math.Inf(1)
	for _, p := range v.Scatter {
		lowest = min(lowest, p.Y)
	}
	if lowest != 1 || v.Best != 1 {
		t.Fatalf("the fastest record is lost: scatter min %v, best %v", lowest, v.Best)
	}
}

// TestDownsampleBounded: many positions stay within MaxPoints, each
// bucket's extremes kept.
func TestDownsampleBounded(t *testing.T) {
	d := downsample{width: 1}
	for x := int64(0); x < 100_000; x++ {
		d.add(x, float64(x%1000))
	}
	pts := d.points()
	if len(pts) > MaxPoints || len(pts) < MaxPoints/2 {
		t.Fatalf("%d points", len(pts))
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].X <= pts[i-1].X {
			t.Fatalf("points out of order at %d: %v %v", i, pts[i-1], pts[i])
		}
	}
}

// board returns a board of recs folded in order (Seq from 1).
func board(recs ...storage.Record) *Board {
	b := New()
	seq := make([]storage.SeqRecord, len(recs))
	for i, r := range recs {
		seq[i] = storage.SeqRecord{Seq: int64(i + 1), Record: r}
	}
	b.mu.Lock()
	b.fold(seq, false)
	b.version++
	b.mu.Unlock()
	return b
}

// rec is a record of prog by host, user and project at date; t < 0: illegal.
func rec(prog, host, user, project, date string, i int, t float64) storage.Record {
	result := fmt.Sprintf(`{"is_legal": true, "execution_times": [%v]}`, t)
	if t < 0 {
		result = `{"is_legal": false, "execution_times": null}`
	}
	return storage.Record{ProgramHash: "h-" + prog, ProgramName: prog, Schedule: fmt.Sprintf("U(L0,%d,comps=['c'])", i),
		ResultJSON: result, Hostname: host, Username: user, SourceProject: project, CreationDate: date}
}

func TestSeriesOthers(t *testing.T) {
	var recs []storage.Record
	for i := 0; i < FleetNames+3; i++ {
		host := fmt.Sprintf("node%02d", i)
		for k := 0; k <= i; k++ {
			recs = append(recs, rec("p", host, "u", "", "1970-01-01T01:40:00Z", k, 1)) // minute 100
		}
		recs = append(recs, rec("p", host, "u", "", time.Unix((100+10*FleetBins)*60, 0).UTC().Format(time.RFC3339), 99, 1))
	}
	s := board(recs...).series(0, Filter{})
	if len(s.Names) != FleetNames+1 || s.Names[FleetNames] != Others || s.Names[0] != fmt.Sprintf("node%02d", FleetNames+2) {
		t.Fatalf("names %v", s.Names)
	}
	if len(s.Counts[0]) > FleetBins || s.Start > 100*60 || s.Start%s.Step != 0 || s.Step != 15*60 {
		t.Fatalf("bins %d start %d step %d", len(s.Counts[0]), s.Start, s.Step)
	}
	var sum int64
	for _, c := range s.Counts {
		for _, n := range c {
			sum += n
		}
	}
	if want := int64((FleetNames+3)*(FleetNames+4)/2 + FleetNames + 3); sum != want {
		t.Fatalf("sum %d, want %d", sum, want)
	}
}

// TestFleetSteps: the bins are of a width a clock reads, aligned on its
// multiples, at most FleetBins of them, and no wider than needed; records
// of one minute are one bin of a minute.
func TestFleetSteps(t *testing.T) {
	for _, c := range []struct{ first, last, step int64 }{
		{1000, 1000, 1}, {1000, 1119, 1}, {1000, 1120, 2}, {1000, 1000 + 60*5, 5}, {0, 24 * 60 * 3, 60},
		{7, 7 + 30*24*60, 720}, {0, 400 * 24 * 60, 10080}, {0, 1000 * 24 * 60, 2 * 10080}, {-1441, 1440, 30},
	} {
		step, start := fleetStep(c.first, c.last)
		if step != c.step || start%step != 0 || start > c.first || start+step <= c.first ||
			(c.last-start)/step+1 > FleetBins {
			t.Errorf("fleetStep(%d, %d) = %d, %d; want a step of %d", c.first, c.last, step, start, c.step)
		}
	}
	// The demo's workload: 240 records within one minute.
	var recs []storage.Record
	for i := 0; i < 240; i++ {
		recs = append(recs, rec("blur", "vm", "root", "demo", fmt.Sprintf("2026-12-06T03:34:%02d.5+00:00", i%60), i, 1))
	}
	s := board(recs...).series(0, Filter{})
	if s.Step != 60 || s.Start != time.Date(2026, 12, 6, 3, 34, 0, 0, time.UTC).Unix() || fmt.Sprint(s.Counts) != "[[240]]" {
		t.Fatalf("one minute of records: %+v", s)
	}
}

// TestFilter: a filter selects the records of a host, a user and a
// project: the programs listed and their counts, best and last record,
// the throughput, a program's steps, scatter and fastest records; the
// choices list every name.
func TestFilter(t *testing.T) {
	b := board(
		rec("blur", "n1", "ann", "beam", "2026-01-01T10:00:00Z", 0, 0.9),
		rec("blur", "n2", "bob", "mcts", "2026-01-01T10:01:00Z", 1, 0.5),
		rec("blur", "n1", "ann", "beam", "2026-01-01T10:02:00Z", 2, 0.7),
		rec("blur", "n2", "bob", "mcts", "2026-01-01T10:03:00Z", 3, -1),
		rec("blur", "n1", "ann", "", "2026-01-01T10:04:00Z", 4, 0.6),
		rec("blur", "n1", "ann", "beam", "2026-01-01T10:05:00Z", 5, 0.4),
		rec("matmul", "n2", "bob", "mcts", "2026-01-01T12:00:00Z", 0, 2),
	)
	str := func(s string) *string { return &s }
	all := b.Overview(0, Filter{})
	if all.Matched != 7 || all.ProgramCount != 2 || all.Programs[0].Records != 6 || all.Programs[0].Best != 0.4 {
		t.Fatalf("no filter: %+v", all)
	}
	if fmt.Sprint(all.Choices) != "[[{n1 4} {n2 3}] [{ann 4} {bob 3}] [{ 1} {beam 3} {mcts 3}]]" {
		t.Fatalf("choices %v", all.Choices)
	}
	beam := Filter{Project: str("beam")}
	o := b.Overview(0, beam)
	if o.Matched != 3 || o.ProgramCount != 1 || len(o.Programs) != 1 || o.Records != 7 {
		t.Fatalf("project beam: %+v", o)
	}
	if r := o.Programs[0]; r.Records != 3 || r.Legal != 3 || r.Best != 0.4 || r.LastRecord != "2026-01-01T10:05:00Z" ||
		r.BestSchedule != "U(L0,5,comps=['c'])" {
		t.Fatalf("blur of beam: %+v", r)
	}
	if s := o.Fleet[0]; fmt.Sprint(s.Names, s.Counts) != "[n1] [[1 0 1 0 0 1]]" || s.Step != 60 {
		t.Fatalf("throughput of beam by host: %+v", s)
	}
	if o := b.Overview(0, Filter{Project: str("")}); o.Matched != 1 || o.Programs[0].Best != 0.6 {
		t.Fatalf("no project: %+v", o)
	}
	bob := Filter{User: str("bob")}
	if o := b.Overview(0, bob); o.Matched != 3 || o.ProgramCount != 2 || o.Programs[0].Illegal != 1 ||
		o.Programs[0].Best != 0.5 || o.Programs[1].Name != "matmul" {
		t.Fatalf("user bob: %+v", o)
	}
	if o := b.Overview(0, Filter{Host: str("n2"), User: str("ann")}); o.Matched != 0 || len(o.Programs) != 0 ||
		len(o.Fleet[0].Names) != 0 {
		t.Fatalf("nobody: %+v", o)
	}
	hash := all.Programs[0].Hash
	v := b.Program(hash, Filter{}, core.DefaultNoisePolicy)
	if fmt.Sprint(v.Steps) != "[{0 0.9} {1 0.5} {5 0.4}]" || len(v.Scatter) != 5 || len(v.Top) != 5 || v.Top[0].Time != 0.4 {
		t.Fatalf("blur: steps %v scatter %v top %+v", v.Steps, v.Scatter, v.Top)
	}
	v = b.Program(hash, Filter{Host: str("n1")}, core.DefaultNoisePolicy)
	if fmt.Sprint(v.Steps) != "[{0 0.9} {2 0.7} {4 0.6} {5 0.4}]" || fmt.Sprint(v.Scatter) != "[{0 0.9} {2 0.7} {4 0.6} {5 0.4}]" ||
		v.Records != 4 || v.Top[1].Time != 0.6 || len(v.Top) != 4 {
		t.Fatalf("blur of n1: %+v", v)
	}
	if b.Program(hash, Filter{Project: str("none")}, core.DefaultNoisePolicy) != nil {
		t.Fatal("a program without a selected record has no view")
	}
}

// TestMergedScatter: the parts' scatters merge into the scatter of their
// union: bounded, in position order, each bucket's fastest and slowest
// record of the selected ones; with one part, that part's own.
func TestMergedScatter(t *testing.T) {
	var recs []storage.Record
	n := 3 * MaxPoints
	for i := 0; i < n; i++ {
		host := []string{"a", "b", "c"}[(i*7)%3]
		recs = append(recs, rec("p", host, "u", "", "2026-01-01T10:00:00Z", i, 1+float64((i*7919)%n)))
	}
	b := board(recs...)
	str := func(s string) *string { return &s }
	for _, f := range []Filter{{}, {Host: str("b")}} {
		v := b.Program("h-p", f, core.DefaultNoisePolicy)
		if len(v.Scatter) > MaxPoints || v.Width < 2 || len(v.Scatter) < MaxPoints/4 {
			t.Fatalf("%v: %d points, width %d", f, len(v.Scatter), v.Width)
		}
		for i := 1; i < len(v.Scatter); i++ {
			if v.Scatter[i].X <= v.Scatter[i-1].X {
				t.Fatalf("out of order at %d", i)
			}
		}
		// Every bucket's extremes, recomputed from the records.
		lo, hi := map[int64]float64{}, map[int64]float64{}
		for i, r := range recs {
			if f.Host != nil && r.Hostname != *f.Host {
				continue
			}
			y := 1 + float64((i*7919)%n)
			k := int64(i) / v.Width
			if l, ok := lo[k]; !ok || y < l {
				lo[k] = y
			}
			if h, ok := hi[k]; !ok || y > h {
				hi[k] = y
			}
		}
		got := map[int64][]float64{}
		for _, pt := range v.Scatter {
			got[pt.X/v.Width] = append(got[pt.X/v.Width], pt.Y)
		}
		for k := range lo {
			ys := got[k]
			if len(ys) == 0 || slices.Min(ys) != lo[k] || slices.Max(ys) != hi[k] {
				t.Fatalf("%v: bucket %d has %v, want %v..%v", f, k, ys, lo[k], hi[k])
			}
		}
	}
}

// TestSearchOf: `tirastore plot`'s data of a program's records: positions
// over every record, illegal and untimed ones apart, each time the median
// of the finite times (an even count averages the middle two), the
// running minimum.
func TestSearchOf(t *testing.T) {
	st := open(t)
	record(t, st, "blur",
		timed(0, 0.5),
		core.Measurement{Schedule: "U(L0,3,comps=['c1'])", IsLegal: false},
		timed(2, 0.2, 0.3, 0.9), // 0.3
		timed(3, 0.4, 0.6),      // 0.5
	)
	// Non-finite times, as other tools (Python's json) write them.
	hash := core.ProgramHash("void blur() {}")
	for i, rj := range []string{`{"is_legal": true, "execution_times": [NaN, Infinity]}`, // no finite time
		`{"is_legal": true, "execution_times": [Infinity, 0.1, NaN, 0.3, true]}`} { // 0.2
		sched := fmt.Sprintf("U(L0,%d,comps=['c1'])", i+6)
		if ok, err := st.Put(ctx, keys.RecordKey(hash, sched), hash, sched, rj, false); !ok || err != nil {
			t.Fatalf("put: %v %v", ok, err)
		}
	}
	recs, err := st.GetProgramRecords(ctx, "blur", "void blur() {}")
	if err != nil || len(recs) != 6 {
		t.Fatalf("records: %d, %v", len(recs), err)
	}
	s := SearchOf(recs)
	want := &Search{X: []int64{0, 2, 3, 5}, Y: []float64{0.5, 0.3, 0.5, 0.2}, Best: []float64{0.5, 0.3, 0.3, 0.2},
		IllegalX: []int64{1}, UntimedX: []int64{4}}
	if fmt.Sprint(s) != fmt.Sprint(want) {
		t.Fatalf("SearchOf = %+v\nwant       %+v", s, want)
	}
	if s := SearchOf(nil); s.X == nil || s.Y == nil || s.IllegalX == nil || len(s.X) != 0 {
		t.Fatalf("no records: %+v (lists must be empty, not nil: they are sent as JSON lists)", s)
	}
}

// A timed-out record's limit is a bound, not a time: the board and the
// plot count it legal and untimed.
func TestCensoredRecordsAreUntimed(t *testing.T) {
	rec := &storage.Record{Key: "k", ProgramHash: "h", ProgramName: "p", Schedule: "R(L0,comps=['c'])",
		ResultJSON: `{"is_legal":true,"execution_times":[30.0],"censored":"timeout"}`,
		Hostname:   "n", Username: "u", CreationDate: "2026-01-01T00:00:00+00:00", UpdateDate: "2026-01-01T00:00:00+00:00"}
	legal, times := outcome(rec)
	if !legal || times != nil {
		t.Fatalf("outcome of a timeout: %v %v; want legal, no times", legal, times)
	}
	res, err := core.ResultOf(rec)
	if err != nil {
		t.Fatal(err)
	}
	if s := SearchOf([]*core.Result{res}); len(s.UntimedX) != 1 || len(s.X) != 0 {
		t.Fatalf("SearchOf a timeout: %+v; want one untimed point", s)
	}
}
