package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"
)

// # The floor, paired
//
// The latency section measures the floor (floor.go) first and last in
// every round, and each client in between, each on a database of its own
// that its whole plan has grown: two medians taken minutes apart on a
// shared machine whose fsync latency drifts from one minute to the next
// (the same code's record over the floor measured 1.09x-1.25x from run to
// run that way). The paired rows take the drift out: a client and the
// floor write in turns, one operation each, on two databases created and
// preloaded alike in the same directory, which both plans grow alike. The
// order within a pair alternates (the first of two writes is not
// favoured), and what is judged is the median of the pairs' ratios, each
// of two writes a moment apart. The floor targets are judged on
// these rows; the unpaired ratios stay in the latency table for reference.
//
// The engine-go client is in this process. The python client is
// pybench.py in role "serve": it runs one write per line of its stdin,
// timed in Python as the latency rows are, and answers each with its
// duration; the floor's turn runs while it waits for its next line.

// pairedOps are the paired rows: the op, its batch and its label.
var pairedOps = []struct {
	label string
	batch int
}{{opRecordNew, 1}, {opMany1000, 1000}}

// pairedRow is one paired row: the client's and the floor's durations (per
// record for record_many), the median of the pairs' ratios (client /
// floor, each pair's two writes a moment apart: what is judged) and the
// ratio of the two medians.
type pairedRow struct {
	Pairs        int      `json:"pairs"`
	Client       *summary `json:"client_per_record"`
	Floor        *summary `json:"floor_per_record"`
	Ratio        fnum     `json:"median_pair_ratio"`
	MediansRatio fnum     `json:"ratio_of_medians"`
	Errors       int      `json:"errors"`
	// FirstError is the first failed or wrong write, if any.
	FirstError string `json:"first_error,omitempty"`
}

// pairedWriter is a client of the paired rows: one timed write of the
// schedules tag, start ... start+batch-1 (record for a batch of 1, else
// record_many).
type pairedWriter interface {
	write(tag, start, batch int) (time.Duration, bool, error)
	Close() error
}

// goWriter times a client of this process; the schedules are made before
// the clock starts.
type goWriter struct{ c client }

func (g goWriter) write(tag, start, batch int) (time.Duration, bool, error) {
	scheds := make([]string, batch)
	for j := range scheds {
		scheds[j] = schedule(tag, start+j)
	}
	t0 := time.Now()
	if batch == 1 {
		ok, err := g.c.Record(scheds[0], false)
		return time.Since(t0), ok, err
	}
	n, err := g.c.RecordMany(scheds, false)
	return time.Since(t0), n == batch, err
}

func (g goWriter) Close() error { return g.c.Close() }

// pyWriter is pybench.py in role "serve".
type pyWriter struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	spec string
}

// pyServeReq is one write asked of pybench.py (pairedWriter.write).
type pyServeReq struct {
	Tag   int `json:"tag"`
	Start int `json:"start"`
	Batch int `json:"batch"`
}

func openPyWriter(cfg *config, db string) (*pyWriter, error) {
	spec := cfg.pySpec(implPython, nil)
	spec.DB, spec.Role = db, "serve"
	path, err := writeSpec(cfg, spec)
	if err != nil {
		return nil, err
	}
	cmd := pythonCmd(cfg, path)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &pyWriter{cmd: cmd, in: in, out: bufio.NewScanner(out), spec: path}
	var hello struct {
		Ready bool   `json:"ready"`
		Skip  string `json:"skip"`
		Error string `json:"error"`
	}
	if err := p.read(&hello); err != nil || !hello.Ready {
		p.Close()
		return nil, fmt.Errorf("pybench.py serve did not start: %v %s%s", err, hello.Skip, hello.Error)
	}
	return p, nil
}

func (p *pyWriter) read(v any) error {
	if !p.out.Scan() {
		if err := p.out.Err(); err != nil {
			return err
		}
		return io.ErrUnexpectedEOF
	}
	return json.Unmarshal(p.out.Bytes(), v)
}

func (p *pyWriter) write(tag, start, batch int) (time.Duration, bool, error) {
	b, _ := json.Marshal(pyServeReq{Tag: tag, Start: start, Batch: batch})
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return 0, false, err
	}
	var r struct {
		NS    int64  `json:"ns"`
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := p.read(&r); err != nil {
		return 0, false, err
	}
	if r.Error != "" {
		return time.Duration(r.NS), false, errors.New(r.Error)
	}
	return time.Duration(r.NS), r.OK, nil
}

func (p *pyWriter) Close() error {
	p.in.Close()
	err := p.cmd.Wait()
	os.Remove(p.spec)
	return err
}

// pairedSteps are the writes of the paired plan: as many records as the
// latency plan's, and four times its record_many(1000) (a median of its
// few pairs moves too much), under the latency plan's tags.
func pairedSteps(z sizes) []step {
	return []step{
		{Label: opRecordNew, Op: "record", N: z.Records, Tag: tagRecordNew, Expect: true},
		{Label: opMany1000, Op: "record_many", N: 4 * z.Many1000, Tag: tagMany1000, Batch: 1000, Expect: true},
	}
}

// pairedFloor runs impl's paired rows (sizes z) against the floor.
func pairedFloor(cfg *config, impl string, z sizes) (map[string]*pairedRow, error) {
	if err := cfg.fresh(); err != nil {
		return nil, err
	}
	_, pool := latencyPlan(cfg.Go)
	clientDB, floorDB := cfg.dbPath(), filepath.Join(cfg.dbDir(), "floor.db")
	for _, db := range []string{clientDB, floorDB} {
		if err := preloadWith(cfg, implEngine, db, pool); err != nil {
			return nil, err
		}
	}
	steps := pairedSteps(z)
	f, err := openFloor(floorDB, steps)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var w pairedWriter
	if impl == implPython {
		w, err = openPyWriter(cfg, clientDB)
	} else {
		var c client
		c, err = openClient(impl, clientDB)
		w = goWriter{c}
	}
	if err != nil {
		return nil, err
	}
	defer w.Close()
	floor := goWriter{f}
	out := map[string]*pairedRow{}
	t0 := time.Now()
	for _, s := range steps {
		batch := max(s.Batch, 1)
		row := &pairedRow{}
		var cns, fns []int64
		var ratios []float64
		for k := 0; k < s.N; k++ {
			start := s.Start + k*batch
			order := []pairedWriter{floor, w}
			if k%2 == 1 {
				order = []pairedWriter{w, floor}
			}
			for _, x := range order {
				d, ok, err := x.write(s.Tag, start, batch)
				if err != nil || !ok {
					row.Errors++
					if row.FirstError == "" {
						row.FirstError = fmt.Sprintf("%s %s: ok=%v %v", s.Label, schedule(s.Tag, start), ok, err)
					}
				}
				if x == floor {
					fns = append(fns, int64(d))
				} else {
					cns = append(cns, int64(d))
				}
			}
			ratios = append(ratios, ratio(float64(cns[k]), float64(fns[k])))
		}
		row.Pairs = s.N
		if s.N > 0 {
			row.Client, row.Floor = summarize(cns).scaled(batch), summarize(fns).scaled(batch)
			row.MediansRatio = fnum(ratio(row.Client.Median, row.Floor.Median))
			slices.Sort(ratios)
			row.Ratio = fnum(ratios[len(ratios)/2])
		}
		out[s.Label] = row
	}
	cfg.logf("paired floor %s: done in %.1f s", impl, time.Since(t0).Seconds())
	return out, nil
}
