package main

import (
	"context"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/outfile"
)

// Output files that a binding writes itself (the CLI's conflicts file, a
// plot): output_create checks the path (outfile.Check, the one output
// check) and creates the temporary file beside it; the binding writes
// through a duplicate of the file's descriptor (its own to close), then
// output_commit renames the file into place, or output_abort removes it.
// The pending files are kept here by token, as stores are by handle.
var outputs = struct {
	sync.Mutex
	next    int64
	pending map[int64]*outfile.Output
}{pending: map[int64]*outfile.Output{}}

// outputMethods are the three methods, added to the call table at init.
var outputMethods = map[string]method{
	"output_create": {false, []string{"purpose", "output_path", "databases", "inputs"}, outputCreate},
	"output_commit": {false, []string{"token"}, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		o, err := takeOutput(a)
		if err != nil {
			return nil, err
		}
		if err := o.Commit(); err != nil {
			k, ok := apierr.OSKind(err)
			if !ok {
				k = core.KindOS
			}
			return nil, apierr.Wrap(k, err, "cannot write %s: %v", o.Path, err)
		}
		return o.Path, nil
	}},
	"output_abort": {false, []string{"token"}, func(_ context.Context, _ *core.Store, a *args) (any, error) {
		o, err := takeOutput(a)
		if err != nil {
			return nil, err
		}
		o.Abort()
		return nil, nil
	}},
}

func init() {
	for name, m := range outputMethods {
		methods[name] = m
	}
}

// outputCreate answers {path, token, fd}: the checked absolute path, the
// token of output_commit and output_abort, and the descriptor (close-on-
// exec) to write the contents through.
func outputCreate(_ context.Context, _ *core.Store, a *args) (any, error) {
	purpose, err := a.str("purpose")
	if err != nil {
		return nil, err
	}
	kind, ok := outfile.ParseKind(purpose)
	if !ok || kind != outfile.Conflicts && kind != outfile.Plot {
		return nil, &core.Error{Kind: core.KindValue, Message: "output_create(): purpose must be 'conflicts' or 'plot', got " + purpose}
	}
	path, err := a.str("output_path")
	if err != nil {
		return nil, err
	}
	lists := map[string][]string{}
	for _, name := range []string{"databases", "inputs"} {
		if _, given := a.get(name); given {
			if lists[name], err = a.strList(name); err != nil {
				return nil, err
			}
		}
	}
	o, err := outfile.Create(kind, path, lists["databases"], lists["inputs"])
	if err != nil {
		return nil, err
	}
	fd, err := unix.FcntlInt(o.File.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		o.Abort()
		return nil, apierr.Wrap(core.KindOS, err, "cannot write %s: %v", o.Path, err)
	}
	outputs.Lock()
	outputs.next++
	tok := outputs.next
	outputs.pending[tok] = o
	outputs.Unlock()
	return replyOutput(o.Path, tok, fd), nil
}

// takeOutput removes the pending output of the token argument from the
// table and returns it.
func takeOutput(a *args) (*outfile.Output, error) {
	tok, err := a.integer("token", 0)
	if err != nil {
		return nil, err
	}
	outputs.Lock()
	defer outputs.Unlock()
	o, ok := outputs.pending[tok]
	if !ok {
		return nil, &core.Error{Kind: core.KindValue, Message: a.method + "(): no pending output file has this token (committed or aborted already)"}
	}
	delete(outputs.pending, tok)
	return o, nil
}
