package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/tuning"
)

// `tirastore dashboard` on a large database, against its targets: first
// paint within 2 s and incremental refreshes on a database of 200,000
// records, records written by other processes on the page within 5 s,
// reads that never hold the lock longer than a lookup does. Section
// "dashboard" of
// -sections; results.json: dashboard.
//
// The database (Programs x Records, written from this process with
// record_many, 1,000 records a call, before anyone measures) is read
// twice from Go, each operation's hold of the lock taken from the lock's
// own counters (Store.LockStats: Held over one acquisition):
//
//   - the dashboard's read: core.Store.RecordsAfter over the whole table, a
//     chunk of tuning.DashboardChunkRows rows per call, as core/dashboard reads
//     it;
//   - lookups in a fresh store, spread over every program's schedules (each
//     a point read under the lock), and as many records of new schedules,
//     each its own transaction: the holds a worker's operations make, which
//     a dashboard read must not exceed.
//
// Then headless Chromium (tests/bench/dashboard_page.py, over
// tests/python/chromium.py) watches `python -m tirastore dashboard` started
// on the database with this tree's package: first paint from the server's
// start (Starts times), and Rounds times a record_many of NewRecords
// records of a new program by another process: from its acknowledgement
// until the program's row is on the page, and the page's poll that brought
// them (its time and bytes, beside an idle poll's). Without chromium or
// Python the page rows say why they are skipped.

// The dashboard's bounds.
const (
	dashFirstPaintTarget = 2.0 // s, server start to the overview on the page
	dashVisibleTarget    = 5.0 // s, a record of another process on the page
)

// tagDash is the schedules' tag of the section's database.
const tagDash = 31

// dashSizes are the section's sizes (flags -dash-*).
type dashSizes struct {
	Programs int `json:"programs"`
	Records  int `json:"records_per_program"`
	Lookups  int `json:"lookups_per_program"`
	Starts   int `json:"starts"`
	Rounds   int `json:"rounds"`
	New      int `json:"new_records"`
}

// dashStart is one start of the server, in seconds from its process's start.
type dashStart struct {
	ServerReadyS float64 `json:"server_ready_s"` // it printed its URL
	FirstPaintS  float64 `json:"first_paint_s"`  // the overview's rows painted
	LiveS        float64 `json:"live_s"`         // the page says the whole table is read
	Rows         int     `json:"rows"`
}

// dashRound is one record_many of another process and what the page did.
type dashRound struct {
	VisibleS         float64 `json:"visible_s"` // acknowledgement to the row painted
	Written          int     `json:"written"`
	WriteS           float64 `json:"write_s"`
	PollS            float64 `json:"poll_s"` // the poll that carried them
	PollBytes        int     `json:"poll_bytes"`
	NewRecordsPolled int     `json:"new_records_polled"`
	IdlePollS        float64 `json:"idle_poll_s"` // a poll with nothing new
	IdlePollBytes    int     `json:"idle_poll_bytes"`
}

// dashPage is dashboard_page.py's report.
type dashPage struct {
	Starts     []dashStart `json:"starts"`
	Rounds     []dashRound `json:"rounds"`
	PageErrors []string    `json:"page_errors"`
	Skipped    string      `json:"skipped,omitempty"`
}

// dashResults is the section's part of results.json (holds in µs).
type dashResults struct {
	Sizes   dashSizes `json:"sizes"`
	Records int       `json:"records"`
	DBBytes int64     `json:"db_bytes"`
	BuildS  fnum      `json:"build_s"`
	// ReadHold: every RecordsAfter chunk over the whole table;
	// LookupHold and RecordHold: the locked lookups, and the records of
	// new schedules.
	ReadHold   *summary `json:"records_after_hold"`
	LookupHold *summary `json:"lookup_hold"`
	RecordHold *summary `json:"record_hold"`
	// HoldMet: the p99 of the RecordsAfter holds is at most the p99 of
	// the holds of a record (see dashTargets).
	HoldMet *bool     `json:"hold_met"`
	Page    *dashPage `json:"page,omitempty"`
	// FirstPaint and Visible summarize the page's starts and rounds (µs).
	FirstPaint    *summary `json:"first_paint"`
	ServerReady   *summary `json:"server_ready"`
	Live          *summary `json:"live"`
	Visible       *summary `json:"new_record_visible"`
	FirstPaintMet *bool    `json:"first_paint_met"`
	VisibleMet    *bool    `json:"new_record_visible_met"`
}

// dashboardSection runs the section; failures go to res.Failed
// ("dashboard": the whole section, "dashboard/page": the browser's rows).
func dashboardSection(cfg *config, res *results) {
	z := cfg.Dash
	out := &dashResults{Sizes: z, Records: z.Programs * z.Records}
	if err := cfg.fresh(); err != nil {
		res.fail("dashboard", err)
		return
	}
	t0 := time.Now()
	if err := dashPreload(cfg.dbPath(), z); err != nil {
		res.fail("dashboard", err)
		cfg.logf("dashboard: %v", err)
		return
	}
	out.BuildS = fnum(time.Since(t0).Seconds())
	if fi, err := os.Stat(cfg.dbPath()); err == nil {
		out.DBBytes = fi.Size()
	}
	cfg.logf("dashboard: %d programs x %d records written in %.2f s (%.0f MiB)", z.Programs, z.Records, float64(out.BuildS), float64(out.DBBytes)/(1<<20))
	if err := dashHolds(cfg.dbPath(), z, out); err != nil {
		res.fail("dashboard", err)
		cfg.logf("dashboard: %v", err)
		return
	}
	res.Dashboard = out
	if why := pythonPrereq(cfg); why != "" {
		res.Skipped["dashboard/page"] = why
		return
	}
	t0 = time.Now()
	page, err := dashRunPage(cfg, z)
	switch {
	case err != nil:
		res.fail("dashboard/page", err)
		cfg.logf("dashboard page: %v", err)
		return
	case page.Skipped != "":
		res.Skipped["dashboard/page"] = page.Skipped
		cfg.logf("dashboard page skipped: %s", page.Skipped)
		return
	}
	cfg.logf("dashboard page: done in %.1f s", time.Since(t0).Seconds())
	out.Page = page
	var paint, ready, live, visible []int64
	ns := func(s float64) int64 { return int64(s * 1e9) }
	for _, s := range page.Starts {
		paint, ready, live = append(paint, ns(s.FirstPaintS)), append(ready, ns(s.ServerReadyS)), append(live, ns(s.LiveS))
	}
	for _, r := range page.Rounds {
		visible = append(visible, ns(r.VisibleS))
	}
	out.FirstPaint, out.ServerReady, out.Live, out.Visible = summarize(paint), summarize(ready), summarize(live), summarize(visible)
	if out.FirstPaint != nil {
		out.FirstPaintMet = boolp(out.FirstPaint.Max/1e6 <= dashFirstPaintTarget)
	}
	if out.Visible != nil {
		out.VisibleMet = boolp(out.Visible.Max/1e6 <= dashVisibleTarget)
	}
}

// dashPreload writes the database: z.Programs programs of z.Records
// records, one in seven illegal, three times each that drift down with
// noise (a search that improves), 1,000 records per record_many.
func dashPreload(db string, z dashSizes) error {
	ctx := context.Background()
	st, err := core.Open(ctx, db, core.Options{CPUModel: benchCPU, SlurmCPUs: "N/A"})
	if err != nil {
		return err
	}
	defer st.Close()
	for p := range z.Programs {
		name, src := dashProgram(p)
		for from := 0; from < z.Records; from += 1000 {
			ms := make([]core.Measurement, 0, 1000)
			for i := from; i < min(from+1000, z.Records); i++ {
				m := core.Measurement{Schedule: schedule(tagDash, i), IsLegal: i%7 != 3}
				if m.IsLegal {
					t := (1 + float64(p)/10) * (0.2 + 0.8*math.Exp(-float64(i)/float64(z.Records)*3)) * (1 + 0.3*math.Abs(math.Sin(float64(i)*12.9898)))
					m.ExecutionTimes = core.Times(t, t*1.02, t*0.99)
				}
				ms = append(ms, m)
			}
			if n, err := st.RecordMany(ctx, name, src, ms, false); err != nil || n != len(ms) {
				return fmt.Errorf("preload of program %d: %d of %d written: %v", p, n, len(ms), err)
			}
		}
	}
	return nil
}

func dashProgram(p int) (name, src string) {
	name = fmt.Sprintf("dash_kernel_%02d", p)
	return name, fmt.Sprintf("void %s(float *a, float *b) { /* %d */ }", name, p)
}

// dashHolds measures the dashboard's reads and the lookups' holds.
func dashHolds(db string, z dashSizes, out *dashResults) error {
	ctx := context.Background()
	opts := core.Options{CPUModel: benchCPU, SlurmCPUs: "N/A"}
	st, err := core.Open(ctx, db, opts)
	if err != nil {
		return err
	}
	// Each store's first operation also opens its connection: one
	// uncounted read first, in both stores (the dashboard's store lives
	// as long as the server).
	if _, err := st.RecordsAfter(ctx, 0, 1); err != nil {
		st.Close()
		return err
	}
	var reads []int64
	read := 0
	for after := int64(0); ; {
		before := st.LockStats()
		recs, err := st.RecordsAfter(ctx, after, tuning.DashboardChunkRows)
		if err != nil {
			st.Close()
			return fmt.Errorf("RecordsAfter after %d: %v", after, err)
		}
		if d := st.LockStats(); d.Acquired-before.Acquired == 1 {
			reads = append(reads, int64(d.Held-before.Held))
		}
		read += len(recs)
		if len(recs) < tuning.DashboardChunkRows {
			break
		}
		after = recs[len(recs)-1].Seq
	}
	st.Close()
	if read != out.Records {
		return fmt.Errorf("RecordsAfter read %d records of %d", read, out.Records)
	}
	if len(reads) == 0 {
		return errors.New("RecordsAfter took no lock: no hold to measure")
	}
	out.ReadHold = summarize(reads)

	// A fresh store: an empty result cache.
	if st, err = core.Open(ctx, db, opts); err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Lookup(ctx, "dash_warmup", "void dash_warmup() {}", schedule(tagDash, 0)); err != nil {
		return err
	}
	var lookups, records []int64
	for p := range z.Programs {
		name, src := dashProgram(p)
		for j := range z.Lookups {
			i := (j*7919 + p*104729) % z.Records // spread over the program
			before := st.LockStats()
			r, err := st.Lookup(ctx, name, src, schedule(tagDash, i))
			if err != nil || r == nil {
				return fmt.Errorf("lookup of %s %d: %v (found: %v)", name, i, err, r != nil)
			}
			if d := st.LockStats(); d.Acquired-before.Acquired == 1 {
				lookups = append(lookups, int64(d.Held-before.Held))
			}
			before = st.LockStats()
			m := core.Measurement{Schedule: schedule(tagDash, z.Records+j), IsLegal: true, ExecutionTimes: core.Times(1.5)}
			if _, err := st.Record(ctx, name, src, m, false); err != nil {
				return fmt.Errorf("record of %s %d: %v", name, z.Records+j, err)
			}
			if d := st.LockStats(); d.Acquired-before.Acquired == 1 {
				records = append(records, int64(d.Held-before.Held))
			}
		}
	}
	out.LookupHold, out.RecordHold = summarize(lookups), summarize(records)
	if out.RecordHold != nil {
		out.HoldMet = boolp(out.ReadHold.P99 <= out.RecordHold.P99)
	}
	return nil
}

// dashRunPage runs dashboard_page.py with this tree's package and library.
func dashRunPage(cfg *config, z dashSizes) (*dashPage, error) {
	spec, err := writeSpec(cfg, map[string]any{"repo": cfg.Repo, "db": cfg.dbPath(), "starts": z.Starts,
		"rounds": z.Rounds, "new_records": z.New, "cpu_model": benchCPU})
	if err != nil {
		return nil, err
	}
	defer os.Remove(spec)
	// Bytecode is written (a warm-up import first): users' installs have it.
	cmd := exec.Command(cfg.Python, filepath.Join(cfg.Repo, "tests", "bench", "dashboard_page.py"), spec)
	cmd.Env = pythonEnv(cfg, false)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var page dashPage
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &page); err != nil {
		return nil, fmt.Errorf("dashboard_page.py: %v (%v)\n%s", runErr, err, lastLines(stderr.String(), 15))
	}
	if runErr != nil {
		return nil, fmt.Errorf("dashboard_page.py: %v\n%s", runErr, lastLines(stderr.String(), 15))
	}
	return &page, nil
}

// dashTargets are the dashboard's rows among the targets.
func dashTargets(res *results) []*target {
	d := res.Dashboard
	if d == nil {
		return nil
	}
	var ts []*target
	size := fmt.Sprintf("%s records", fmtCount(float64(d.Records)))
	if d.FirstPaint != nil {
		ts = append(ts, &target{ID: "dashboard-first-paint", Name: "dashboard first paint from the server's start, " + size + " (longest of " + fmt.Sprint(d.FirstPaint.N) + ")",
			Value: fnum(d.FirstPaint.Max / 1e6), Unit: "s", Goal: "<= " + fmtNum(dashFirstPaintTarget), Met: d.FirstPaintMet,
			Detail: fmt.Sprintf("median %.2f s; server printed its URL after %.2f s; whole table read after %.2f s", d.FirstPaint.Median/1e6, d.ServerReady.Median/1e6, d.Live.Median/1e6)})
	}
	if d.Visible != nil {
		ts = append(ts, &target{ID: "dashboard-new-record", Name: "dashboard, a record of another process on the page (longest of " + fmt.Sprint(d.Visible.N) + ")",
			Value: fnum(d.Visible.Max / 1e6), Unit: "s", Goal: "<= " + fmtNum(dashVisibleTarget), Met: d.VisibleMet,
			Detail: fmt.Sprintf("median %.2f s from the writer's acknowledgement (the page polls every 2 s, the server reads every 1 s)", d.Visible.Median/1e6)})
	}
	if d.ReadHold != nil && d.RecordHold != nil {
		// The p99, not the longest hold: on a loaded node the longest of
		// either series is a hold the scheduler preempted, far above both
		// p99s, and the dashboard makes more holds, so more draws of that
		// spike (docs/performance.md, "Dashboard").
		ts = append(ts, &target{ID: "dashboard-hold", Name: "p99 hold of a dashboard read / of a record, " + size,
			Value: fnum(d.ReadHold.P99 / d.RecordHold.P99), Unit: "x", Goal: "<= 1", Met: d.HoldMet,
			Detail: fmt.Sprintf("%s vs %s µs (medians %s vs %s, longest %s vs %s)", fmtUS(d.ReadHold.P99), fmtUS(d.RecordHold.P99),
				fmtUS(d.ReadHold.Median), fmtUS(d.RecordHold.Median), fmtUS(d.ReadHold.Max), fmtUS(d.RecordHold.Max))})
	}
	return ts
}

// writeDashboard prints the section's table.
func writeDashboard(w io.Writer, res *results) {
	d := res.Dashboard
	why, skipped := res.Skipped["dashboard"]
	if d == nil && !skipped {
		return
	}
	fmt.Fprintf(w, "\n   tirastore dashboard")
	if d == nil {
		fmt.Fprintf(w, ": SKIPPED: %s\n", why)
		return
	}
	fmt.Fprintf(w, ", %d programs x %d records (%s records, %.0f MiB, written in %.2f s):\n", d.Sizes.Programs, d.Sizes.Records,
		fmtCount(float64(d.Records)), float64(d.DBBytes)/(1<<20), float64(d.BuildS))
	fmt.Fprintf(w, "   holds of the lock (µs; the lock's own counters, one acquisition per operation):\n")
	t := newTable("l", "", "n", "median", "p99", "max")
	hold := func(name string, s *summary) {
		if s != nil {
			t.add(name, fmt.Sprint(s.N), fmtUS(s.Median), fmtUS(s.P99), fmtUS(s.Max))
		}
	}
	hold(fmt.Sprintf("dashboard read: RecordsAfter, %d rows", tuning.DashboardChunkRows), d.ReadHold)
	hold("lookup (a point read)", d.LookupHold)
	hold("record of a new schedule (a transaction)", d.RecordHold)
	t.write(w, "  ")
	if why, ok := res.Skipped["dashboard/page"]; ok {
		fmt.Fprintf(w, "   page rows SKIPPED: %s\n", why)
		return
	}
	p := d.Page
	if p == nil {
		return
	}
	fmt.Fprintf(w, "   the page in headless Chromium (tests/bench/dashboard_page.py):\n")
	t = newTable("l", "", "n", "median", "max", "target", "met?")
	sec := func(name string, s *summary, tgt string, met *bool) {
		if s != nil {
			t.add(name, fmt.Sprint(s.N), fmt.Sprintf("%.2f s", s.Median/1e6), fmt.Sprintf("%.2f s", s.Max/1e6), tgt, metStr(met))
		}
	}
	sec("server start -> URL printed", d.ServerReady, "", nil)
	sec("server start -> overview painted", d.FirstPaint, "<= "+fmtNum(dashFirstPaintTarget)+" s", d.FirstPaintMet)
	sec("server start -> whole table read", d.Live, "", nil)
	sec(fmt.Sprintf("record_many(%d) acknowledged -> its program painted", d.Sizes.New), d.Visible, "<= "+fmtNum(dashVisibleTarget)+" s", d.VisibleMet)
	t.write(w, "  ")
	if len(p.Rounds) > 0 {
		var polls, idles []string
		for _, r := range p.Rounds {
			polls = append(polls, fmt.Sprintf("%.1f ms/%d B", r.PollS*1e3, r.PollBytes))
			idles = append(idles, fmt.Sprintf("%.1f ms/%d B", r.IdlePollS*1e3, r.IdlePollBytes))
		}
		fmt.Fprintf(w, "   the poll that brought the new records (time to its body's end / bytes): %s\n", strings.Join(polls, ", "))
		fmt.Fprintf(w, "   an idle poll before each write: %s\n", strings.Join(idles, ", "))
	}
	if len(p.PageErrors) > 0 {
		fmt.Fprintf(w, "   PAGE ERRORS: %s\n", strings.Join(p.PageErrors, "; "))
	}
}
