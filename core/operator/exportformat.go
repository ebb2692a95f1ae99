package operator

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/outfile"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/schedule"
	"github.com/tirastore/tirastore/core/shareddir"
	"github.com/tirastore/tirastore/core/storage"
)

// # The original's export format
//
// An export is every program with its schedules, as the original library
// wrote it: "json", one object {name: entry} indented by 2, or "jsonl",
// one {name: entry} object per line; an entry is {"Tiramisu_cpp": source,
// "schedules_list": [{"schedule_str", "is_legal", "execution_times"}],
// "program_name": name}, and a name with several sources becomes
// <name>_v1, <name>_v2, ... An export with runs adds to each schedule the
// "runs" of its record, each with its context inline (core.ExportRuns):
// other tools ignore the key, and an import stores them. A censored
// result (core/censored.go) has its "censored" kind beside its times. The format is
// written (Export, exportWriter) and read back (Import, exportReader)
// here, in one file, so that the two sides change together.

// exportFormats are the formats the original's export accepts.
var exportFormats = map[string]bool{"json": true, "jsonl": true}

// Export writes every program with its schedules to path as JSON ("json":
// one object, indent 2) or JSON Lines ("jsonl": one program per line), byte
// for byte as the original did, and returns the absolute path. path must
// pass the output check (see "Output files": never the database or a file
// of it, nor another database). A record whose result_json is not JSON
// (a direct write to the table can leave one) is left out of the export
// rather than failing it; warnings then say how many.
//
// With runs, each schedule also carries its record's runs (see "The
// original's export format").
func Export(ctx context.Context, s *core.Store, path, format string, runs bool) (string, []string, error) {
	if !exportFormats[format] {
		return "", nil, apierr.New(apierr.KindValue, "fmt must be 'json' or 'jsonl', got %s", schedule.Repr(format))
	}
	if err := input.Text("output_path", path); err != nil {
		return "", nil, err
	}
	if err := outfile.Given(outfile.Export, path); err != nil {
		return "", nil, err
	}
	out, err := input.Path("export path", path)
	if err != nil {
		return "", nil, err
	}
	if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		perr := &fs.PathError{Op: "open", Path: out, Err: syscall.EISDIR}
		return "", nil, apierr.Wrap(apierr.KindOS, perr, "cannot write export: %v", perr)
	}
	if err := s.CheckOutput(outfile.Export, out, nil); err != nil {
		return "", nil, err
	}
	var contexts map[string]string
	if runs {
		// Read first, apart: few, and a context stored during the export
		// only leaves a run of it without its context.
		if err := s.Backend().View(ctx, "export", func(r storage.Reader) (err error) {
			contexts, err = r.AllContexts()
			return err
		}); err != nil {
			return "", nil, err
		}
	}
	var ew *exportWriter
	err = outfile.WriteReplacing(out, outfile.PermFor(s.Path()), func(w *bufio.Writer) error {
		ew = &exportWriter{w: w, json: format == "json", runs: runs, contexts: contexts}
		err := s.Backend().EachProgram(ctx, ew.program)
		if err == nil {
			err = ew.finish()
		}
		if ew.err != nil {
			err = ew.err
		}
		return err
	})
	if err != nil {
		return "", nil, outfile.WriteError(err, "export", out)
	}
	var warnings []string
	if ew.skipped > 0 {
		warnings = []string{s.UnreadableResults(ew.skipped, "the export "+out+" leaves them out")}
	}
	return out, warnings, nil
}

// exportWriter writes an export while the backend scans the programs, in
// the original's format: a program name with several source versions
// becomes <name>_v1, <name>_v2, ... (in hash order); the versions of one
// name come one after another in the scan (by name, then hash), so only
// they are held in memory at once.
type exportWriter struct {
	w     *bufio.Writer
	json  bool   // "json" (one object, indent 2), else "jsonl"
	name  string // the name of the entries in group
	group []any  // the entries of name, not written yet
	n     int    // entries written
	err   error  // the first write error (the scan then stops)
	// skipped counts the records left out: their result_json is not JSON.
	skipped int64
	// runs: each schedule carries its record's runs, with their contexts.
	runs     bool
	contexts map[string]string
}

// errExportWrite stops the scan after a write error (exportWriter.err).
var errExportWrite = errors.New("export write failed")

// exportJSON is json.dumps(indent=2) as the original wrote it; exportLine
// is the json.dumps default of each JSON Lines line.
var (
	exportJSON = pyjson.Options{Indent: 2, ItemSep: ",", KeySep: ": "}
	exportLine = pyjson.Options{Indent: -1, ItemSep: ", ", KeySep: ": "}
)

// program takes the next program of the scan.
func (ew *exportWriter) program(p storage.Program, rs []storage.ScheduleResult) error {
	if len(ew.group) > 0 && p.Name != ew.name {
		if err := ew.flush(); err != nil {
			return err
		}
	}
	list := make([]any, 0, len(rs))
	for _, r := range rs {
		legal, times, err := core.ParseResult(p.Hash, r.ResultJSON)
		if err != nil {
			ew.skipped++
			continue
		}
		item := pyjson.NewObjectCap(5)
		item.Set("schedule_str", r.Schedule)
		item.Set("is_legal", legal)
		item.Set("execution_times", times)
		if c := core.ResultCensored(r.ResultJSON); c != "" {
			item.Set("censored", c)
		}
		if ew.runs {
			if runs := core.ExportRuns(r.Runs, ew.contexts); runs != nil {
				item.Set("runs", runs)
			}
		}
		list = append(list, item)
	}
	entry := pyjson.NewObjectCap(3)
	entry.Set("Tiramisu_cpp", p.Source)
	entry.Set("schedules_list", list)
	entry.Set("program_name", p.Name)
	ew.name, ew.group = p.Name, append(ew.group, entry)
	return nil
}

// flush writes the entries of one name.
func (ew *exportWriter) flush() error {
	for i, entry := range ew.group {
		key := ew.name
		if len(ew.group) > 1 {
			key = fmt.Sprintf("%s_v%d", ew.name, i+1)
		}
		if err := ew.entry(key, entry); err != nil {
			return err
		}
	}
	ew.group = ew.group[:0]
	return nil
}

// entry writes one top-level key and its value.
func (ew *exportWriter) entry(key string, v any) error {
	var b []byte
	if ew.json {
		k, err := pyjson.Marshal(key, exportJSON)
		if err != nil {
			return apierr.Wrap(apierr.KindInternal, err, "encode export: %v", err)
		}
		val, err := pyjson.Marshal(v, exportJSON)
		if err != nil {
			return apierr.Wrap(apierr.KindInternal, err, "encode export: %v", err)
		}
		sep := ",\n  "
		if ew.n == 0 {
			sep = "{\n  "
		}
		b = append(append(append([]byte(sep), k...), ": "...), nest(val)...)
	} else {
		line := pyjson.NewObjectCap(1)
		line.Set(key, v)
		l, err := pyjson.Marshal(line, exportLine)
		if err != nil {
			return apierr.Wrap(apierr.KindInternal, err, "encode export: %v", err)
		}
		b = append(l, '\n')
	}
	ew.n++
	return ew.write(b)
}

// nest indents a value written at the top level by one more level: every
// line after the first gains the indent (strings hold no raw newlines: JSON
// escapes them).
func nest(val []byte) []byte {
	return bytes.ReplaceAll(val, []byte("\n"), []byte("\n  "))
}

// finish writes the last name's entries and the end of the document.
func (ew *exportWriter) finish() error {
	if err := ew.flush(); err != nil {
		return err
	}
	if ew.json {
		end := "\n}\n"
		if ew.n == 0 {
			end = "{}\n"
		}
		if err := ew.write([]byte(end)); err != nil {
			return err
		}
	}
	if err := ew.w.Flush(); err != nil {
		ew.err = err
		return errExportWrite
	}
	return nil
}

func (ew *exportWriter) write(b []byte) error {
	if _, err := ew.w.Write(b); err != nil {
		ew.err = err
		return errExportWrite
	}
	return nil
}

// # Importing an export
//
// Import reads the original's export format (Export's output, json or
// jsonl) back into a store, a slice of the file at a time: each call
// starts at a byte offset that an earlier call returned, reads up to a
// number of records, and says where the next call starts, so that a
// caller can show progress and memory stays that of one slice whatever
// the file's size. Each program of a slice is one lookup_many and one
// record_many (one transaction); a record whose key exists is "same" when
// its result is the one stored, else a conflict, written only with
// overwrite.

// TransferResult counts what one slice of an import did.
type TransferResult struct {
	Programs, Records                int64
	Added, Same, Conflicts, Replaced int64
	// Merged counts the records measured in both databases whose samples
	// were merged (a merge appends the runs this database lacks).
	Merged int64
	// Next is the offset the next call starts at, -1 when the file is
	// done; Size is the file's size, for progress.
	Next, Size int64
	// ConflictList holds the conflicting records of this slice (when
	// asked for): what is stored and what the file says.
	ConflictList []Conflict
}

// Conflict is a record whose key exists with another result.
type Conflict struct {
	ProgramName, Schedule, Stored, Incoming string
}

// Import imports into s the export file path from byte offset (0 or a
// Next of an earlier call) until about maxRecords records (at least one
// program) have been read; see "Importing an export".
func Import(ctx context.Context, s *core.Store, path string, offset int64, maxRecords int, overwrite, listConflicts bool) (*TransferResult, error) {
	abs, err := exportPath(path)
	if err != nil {
		return nil, err
	}
	if err := s.CheckWrites(); err != nil {
		return nil, err
	}
	f, size, er, err := openExport(abs, offset)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	res := &TransferResult{Size: size, Next: -1}
	if er == nil {
		return res, nil // the jsonl export of an empty database
	}
	for maxRecords <= 0 || res.Records < int64(maxRecords) {
		key, name, source, ms, runs, err := er.entry(abs)
		if errors.Is(err, io.EOF) {
			res.Next = -1
			return res, nil
		}
		if err != nil {
			return nil, err
		}
		if err := importProgram(ctx, s, name, source, ms, runs, overwrite, listConflicts, res); err != nil {
			return nil, apierr.Prefix(fmt.Sprintf("%s: program %s: ", abs, schedule.Repr(key)), err)
		}
		res.Next = er.pos
	}
	if _, _, err := er.peekEnd(); errors.Is(err, io.EOF) {
		res.Next = -1
	}
	return res, nil
}

// CheckImport is the error Import would give for the export file path
// before it writes anything: the file cannot be read as an export (not a
// regular file, not an export, a first program that is not one), so that
// a command that creates its database refuses the input first.
func CheckImport(path string) error {
	abs, err := exportPath(path)
	if err != nil {
		return err
	}
	f, _, er, err := openExport(abs, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if er == nil {
		return nil
	}
	if _, _, _, _, _, err := er.entry(abs); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// exportPath is the absolute form of the export file path. A pipe given
// by a name (/dev/stdin, a shell's <(zcat x.gz)) is a link to no file
// ("pipe:[N]"): it is refused here by what stat(2) says of it, which
// neither opens nor blocks; openExport refuses a FIFO that has a name.
func exportPath(path string) (string, error) {
	abs, err := input.File("input_path", path)
	if err != nil {
		return "", err
	}
	if _, err := os.Lstat(abs); !errors.Is(err, fs.ErrNotExist) {
		return abs, nil // a file, refused or read by openExport
	}
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
		what := "a special file"
		switch t := fi.Mode().Type(); {
		case t&fs.ModeNamedPipe != 0:
			what = "a pipe"
		case t&fs.ModeSocket != 0:
			what = "a socket"
		case t&fs.ModeCharDevice != 0:
			what = "a character device"
		}
		return "", notAnExportFile(path, what)
	}
	return abs, nil
}

// notAnExportFile is the refusal of an input that is what, not a regular
// file, with the way to import its stream.
func notAnExportFile(path, what string) error {
	return apierr.New(apierr.KindValue, "%s is %s, not a regular file: import reads an export file in "+
		"slices, by byte offset, which a pipe cannot give; write the stream to a file first (e.g. "+
		"`zcat export.json.gz > export.json`) and import that", path, what)
}

// openExport opens the export file abs for reading from byte offset: the
// file, its size and a reader of it (nil for an empty file, the jsonl
// export of an empty database). It never blocks: a FIFO would hold
// open(2) until a writer comes, past Ctrl-C, and a pipe cannot be read in
// slices by byte offset.
func openExport(abs string, offset int64) (*os.File, int64, *exportReader, error) {
	f, fi, err := shareddir.Open(abs, os.O_RDONLY)
	var refused *shareddir.Refused
	if errors.As(err, &refused) && fi == nil {
		if st, serr := os.Stat(abs); serr == nil && st.IsDir() {
			perr := &fs.PathError{Op: "read", Path: abs, Err: syscall.EISDIR}
			return nil, 0, nil, apierr.Wrap(apierr.KindOS, perr, "cannot read export %s: %v", abs, perr)
		}
		return nil, 0, nil, notAnExportFile(abs, refused.What)
	}
	if err != nil {
		return nil, 0, nil, input.ReadError(err, "export", abs)
	}
	if fi.Size == 0 {
		return f, 0, nil, nil
	}
	er, err := newExportReader(f, offset)
	if err != nil {
		f.Close()
		return nil, 0, nil, apierr.Wrap(apierr.KindValue, err, "%s is not a TiraStore export: %v", abs, err)
	}
	return f, fi.Size, er, nil
}

// importProgram writes one program's measurements into s, with the runs
// the export gave (runs[i] nil: none), counting them in res.
func importProgram(ctx context.Context, s *core.Store, name, source string, ms []core.Measurement, runs []any, overwrite, list bool, res *TransferResult) error {
	res.Programs++
	res.Records += int64(len(ms))
	w, bad, err := s.PrepareWrite(name, source, ms, overwrite)
	if err != nil {
		return apierr.Prefix(fmt.Sprintf("schedules_list[%d]: ", bad), err)
	}
	for i, v := range runs {
		if v == nil {
			continue
		}
		text, contexts, err := core.ImportRuns(v, len(ms[i].ExecutionTimes))
		if err != nil {
			return apierr.Prefix(fmt.Sprintf("schedules_list[%d]: ", i), err)
		}
		w.Rows[i].Runs = text
		for _, c := range contexts {
			if !slices.Contains(w.Contexts, c) {
				w.Contexts = append(w.Contexts, c)
			}
		}
	}
	rows := w.Rows
	keys := make([]string, len(rows))
	for i, r := range rows {
		keys[i] = r.Key
	}
	stored, err := s.Backend().LookupMany(ctx, w.Hash, keys)
	if err != nil {
		return err
	}
	var write []storage.Row
	var added, replaced int64
	for i, rec := range stored {
		switch {
		case rec == nil:
			write = append(write, rows[i])
			added++
		case rec.ResultJSON == rows[i].ResultJSON:
			res.Same++
		default:
			res.Conflicts++
			if list {
				res.ConflictList = append(res.ConflictList, Conflict{name, rows[i].Schedule, rec.ResultJSON, rows[i].ResultJSON})
			}
			if overwrite {
				write = append(write, rows[i])
				replaced++
			}
		}
	}
	if len(write) == 0 {
		return nil
	}
	w.Rows = write
	n, err := s.Backend().Write(ctx, w)
	if err != nil {
		return err
	}
	// Another writer may have stored some of the new keys meanwhile.
	res.Added += min(added, int64(n))
	res.Replaced += min(replaced, int64(n)-min(added, int64(n)))
	return nil
}

// exportEntry reads one program of an export: {"Tiramisu_cpp": source,
// "schedules_list": [{"schedule_str", "is_legal", "execution_times"}],
// "program_name": name}, and each schedule's "runs" (nil without).
func exportEntry(key string, v any) (name, source string, ms []core.Measurement, runs []any, err error) {
	o, ok := v.(*pyjson.Object)
	if !ok {
		return "", "", nil, nil, errors.New("not an object")
	}
	str := func(field string) (string, error) {
		x, found := o.Get(field)
		if !found {
			return "", fmt.Errorf("%s is missing", field)
		}
		s, ok := x.(string)
		if !ok {
			return "", fmt.Errorf("%s is not a string", field)
		}
		return s, nil
	}
	if source, err = str("Tiramisu_cpp"); err != nil {
		return
	}
	if name, err = str("program_name"); err != nil {
		return
	}
	if err = input.Texts("program_name", name, "Tiramisu_cpp", source); err != nil {
		return
	}
	x, found := o.Get("schedules_list")
	list, ok := x.([]any)
	switch {
	case !found:
		return "", "", nil, nil, errors.New("schedules_list is missing")
	case !ok:
		return "", "", nil, nil, errors.New("schedules_list is not a list")
	}
	ms = make([]core.Measurement, len(list))
	runs = make([]any, len(list))
	for i, it := range list {
		item, ok := it.(*pyjson.Object)
		if !ok {
			return "", "", nil, nil, fmt.Errorf("schedules_list[%d] is not an object", i)
		}
		sv, _ := item.Get("schedule_str")
		sched, ok := sv.(string)
		lv, _ := item.Get("is_legal")
		legal, lok := lv.(bool)
		if !ok || !lok {
			return "", "", nil, nil, fmt.Errorf("schedules_list[%d]: schedule_str must be a string and is_legal a bool", i)
		}
		tv, _ := item.Get("execution_times")
		m := core.Measurement{Schedule: sched, IsLegal: legal}
		switch t := tv.(type) {
		case nil:
		case []any:
			m.ExecutionTimes = make([]pyjson.Number, len(t))
			for j, n := range t {
				num, ok := n.(pyjson.Number)
				if !ok {
					return "", "", nil, nil, fmt.Errorf("schedules_list[%d]: execution_times[%d] is not a number", i, j)
				}
				m.ExecutionTimes[j] = num
			}
		default:
			return "", "", nil, nil, fmt.Errorf("schedules_list[%d]: execution_times is neither a list nor null", i)
		}
		if cv, ok := item.Get("censored"); ok && cv != nil {
			kind, _ := cv.(string)
			if err := m.SetCensored(kind); err != nil {
				return "", "", nil, nil, fmt.Errorf("schedules_list[%d]: %v", i, err)
			}
		}
		ms[i] = m
		runs[i], _ = item.Get("runs")
	}
	return name, source, ms, runs, nil
}

// exportReader yields the top-level members of an export one at a time,
// from a byte offset: the "json" format (one object, indent 2) or "jsonl"
// (one {name: entry} object per line), told apart by the first line.
type exportReader struct {
	r     *bufio.Reader
	pos   int64 // bytes consumed from the start of the file
	lines bool  // jsonl
}

func newExportReader(f *os.File, offset int64) (*exportReader, error) {
	head := make([]byte, 2)
	n, _ := f.ReadAt(head, 0)
	first := bytes.TrimLeft(head[:n], " \t\r\n")
	er := &exportReader{}
	// json starts "{\n" (or "{}" when empty); jsonl "{"name"...".
	er.lines = n > 0 && !(len(first) == 0 || bytes.Equal(head[:n], []byte("{\n")) || bytes.Equal(head[:n], []byte("{}")))
	if offset < 0 {
		return nil, fmt.Errorf("offset %d is negative", offset)
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	er.r, er.pos = bufio.NewReaderSize(f, 1<<16), offset
	if !er.lines && offset == 0 {
		if c, err := er.skipSpace(); err != nil || c != '{' {
			return nil, errors.New("it does not start with '{'")
		}
		er.read()
	}
	return er, nil
}

// entry reads the next program of the export abs (io.EOF after the last)
// and checks it: its key, name, source, measurements and runs.
func (er *exportReader) entry(abs string) (key, name, source string, ms []core.Measurement, runs []any, err error) {
	key, v, err := er.next()
	if errors.Is(err, io.EOF) {
		return "", "", "", nil, nil, err
	}
	var se *syntaxError
	switch {
	case errors.As(err, &se):
		return "", "", "", nil, nil, apierr.Wrap(apierr.KindValue, err, "%s is not a TiraStore export: %v", abs, err)
	case err != nil:
		return "", "", "", nil, nil, apierr.Wrap(apierr.KindValue, err, "%s (at byte %d) is not a TiraStore export: %v", abs, er.pos, err)
	}
	name, source, ms, runs, err = exportEntry(key, v)
	if err != nil {
		return "", "", "", nil, nil, apierr.Wrap(apierr.KindValue, err, "%s: program %s: %v", abs, schedule.Repr(key), err)
	}
	return key, name, source, ms, runs, nil
}

func (er *exportReader) read() (byte, error) {
	c, err := er.r.ReadByte()
	if err == nil {
		er.pos++
	}
	return c, err
}

// skipSpace skips whitespace and returns the next byte without consuming it.
func (er *exportReader) skipSpace() (byte, error) {
	for {
		b, err := er.r.Peek(1)
		if err != nil {
			return 0, err
		}
		if !strings.ContainsRune(" \t\r\n", rune(b[0])) {
			return b[0], nil
		}
		er.read()
	}
}

// peekEnd reports, without consuming a member, whether the file ends here
// (io.EOF) or a member follows.
func (er *exportReader) peekEnd() (byte, bool, error) {
	c, err := er.skipSpace()
	if err != nil {
		return 0, false, err
	}
	if !er.lines && (c == ',' || c == '}') {
		if c == '}' {
			return c, false, io.EOF
		}
	}
	return c, true, nil
}

// next returns the next member (key and parsed value), or io.EOF.
func (er *exportReader) next() (string, any, error) {
	c, err := er.skipSpace()
	if errors.Is(err, io.EOF) {
		if er.lines {
			return "", nil, io.EOF
		}
		return "", nil, errors.New("it ends before its closing '}'")
	}
	if err != nil {
		return "", nil, err
	}
	if er.lines {
		line, err := er.r.ReadBytes('\n')
		er.pos += int64(len(line))
		if err != nil && !errors.Is(err, io.EOF) {
			return "", nil, err
		}
		v, perr := pyjson.Parse(bytes.TrimRight(line, "\r\n"))
		if perr != nil {
			return "", nil, atByte(perr, er.pos-int64(len(line)))
		}
		o, ok := v.(*pyjson.Object)
		if !ok || o.Len() != 1 {
			return "", nil, errors.New("a line is not an object of one program")
		}
		k := o.Keys()[0]
		val, _ := o.Get(k)
		return k, val, nil
	}
	switch c {
	case '}':
		return "", nil, io.EOF
	case ',':
		er.read()
		if c, err = er.skipSpace(); err != nil {
			return "", nil, err
		}
	}
	if c != '"' {
		return "", nil, fmt.Errorf("expected a program name, found %q", c)
	}
	keyAt := er.pos
	kb, err := er.value()
	if err != nil {
		return "", nil, err
	}
	if c, err = er.skipSpace(); err != nil || c != ':' {
		return "", nil, errors.New("expected ':' after a program name")
	}
	er.read()
	if _, err = er.skipSpace(); err != nil {
		return "", nil, err
	}
	vb, err := er.value()
	if err != nil {
		return "", nil, err
	}
	kv, err := pyjson.Parse(kb)
	if err != nil {
		return "", nil, atByte(err, keyAt)
	}
	v, err := pyjson.Parse(vb)
	if err != nil {
		return "", nil, atByte(err, er.pos-int64(len(vb)))
	}
	return kv.(string), v, nil
}

// syntaxError is a JSON syntax error of an export, at a byte of the file
// (pyjson's offsets are into the one value it parsed).
type syntaxError struct {
	msg string
	at  int64
}

func (e *syntaxError) Error() string { return fmt.Sprintf("%s at byte %d", e.msg, e.at) }

// atByte is err, from parsing a value that starts at byte start of the
// file, with the file's position when it is a syntax error.
func atByte(err error, start int64) error {
	var se *pyjson.SyntaxError
	if errors.As(err, &se) {
		return &syntaxError{msg: se.Msg, at: start + int64(se.Offset)}
	}
	return err
}

// value reads the bytes of one JSON string or container, by its brackets
// and quotes (pyjson.Parse then checks it).
func (er *exportReader) value() ([]byte, error) {
	var out []byte
	depth, inStr, esc := 0, false, false
	for {
		c, err := er.read()
		if err != nil {
			return nil, errors.New("it ends inside a value")
		}
		out = append(out, c)
		switch {
		case inStr && esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case c == '"':
			inStr = !inStr
			if !inStr && depth == 0 {
				return out, nil
			}
		case inStr:
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return out, nil
			}
		}
	}
}
