package dashboard

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/keys"
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
	o := b.Overview(0)
	if o.Records != 5 || o.Legal != 4 || o.Illegal != 1 || o.Untimed != 0 || o.ProgramCount != 2 || len(o.Programs) != 2 {
		t.Fatalf("overview counts %+v", o)
	}
	if o.Programs[0].Name != "<script>" || o.Programs[1].Name != "blur" || o.Programs[1].Best != 0.3 {
		t.Fatalf("programs %+v", o.Programs)
	}
	hash := o.Programs[1].Hash
	v := b.Program(hash)
	if fmt.Sprint(v.Steps) != "[{0 0.5} {2 0.3}]" || v.BestSchedule != "U(L0,4,comps=['c1'])" {
		t.Fatalf("steps %v best %q", v.Steps, v.BestSchedule)
	}
	if len(v.Top) != 3 || v.Top[0].Time != 0.3 || v.Top[0].Min != 0.2 || v.Top[0].Max != 0.9 || v.Top[0].Runs != 3 ||
		v.Top[1].Time != 0.4 || v.Top[2].Time != 0.5 {
		t.Fatalf("top %+v", v.Top)
	}
	if f := o.Fleet[0]; len(f.Names) != 1 || f.Counts[0][len(f.Counts[0])-1] == 0 {
		t.Fatalf("fleet by host %+v", f)
	}

	// Nothing new: no change, no version; then one record of blur: only
	// blur is listed as changed since the version the page had.
	if added, _, _ := b.Refresh(ctx, st, 0); added != 0 || b.Overview(0).Version != o.Version {
		t.Fatalf("an idle refresh added %d", added)
	}
	record(t, st, "blur", timed(7, 0.1))
	if added, _, _ := b.Refresh(ctx, st, 0); added != 1 {
		t.Fatalf("refresh added %d, want 1", added)
	}
	o2 := b.Overview(o.Version)
	if len(o2.Programs) != 1 || o2.Programs[0].Name != "blur" || o2.Programs[0].Best != 0.1 || o2.Records != 6 {
		t.Fatalf("incremental overview %+v", o2)
	}
	if math.IsNaN(o2.Programs[0].Best) || b.Program("no such hash") != nil {
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
	v := b.Program(b.Overview(0).Programs[0].Hash)
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

func TestSeriesOthers(t *testing.T) {
	byName := map[string]map[int64]int64{}
	for i := 0; i < FleetNames+3; i++ {
		byName[fmt.Sprintf("node%02d", i)] = map[int64]int64{100: int64(i + 1), 100 + 10*FleetBins: 1}
	}
	s := series(byName)
	if len(s.Names) != FleetNames+1 || s.Names[FleetNames] != Others || s.Names[0] != fmt.Sprintf("node%02d", FleetNames+2) {
		t.Fatalf("names %v", s.Names)
	}
	if len(s.Counts[0]) > FleetBins || s.Start != 100*60 {
		t.Fatalf("bins %d start %d", len(s.Counts[0]), s.Start)
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
