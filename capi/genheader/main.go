// Command genheader writes include/tirastore.h from the capi package and
// the error table: one prototype per //export function of capi (with its
// doc comment), TIRASTORE_OK and one #define per row of core/apierr.Table.
// The header is checked in; the test beside this file fails when it is out
// of date.
//
//	go run ./capi/genheader            # rewrite include/tirastore.h
//	go run ./capi/genheader -check     # exit 1 if it is stale
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tirastore/tirastore/core/apierr"
)

func main() {
	dir := flag.String("capi", "capi", "directory of the capi package")
	out := flag.String("o", "include/tirastore.h", "header to write")
	check := flag.Bool("check", false, "compare instead of writing; exit 1 if different")
	flag.Parse()
	h, err := Generate(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "genheader:", err)
		os.Exit(2)
	}
	if *check {
		old, _ := os.ReadFile(*out)
		if !bytes.Equal(old, h) {
			fmt.Fprintf(os.Stderr, "genheader: %s is out of date; run: go run ./capi/genheader\n", *out)
			os.Exit(1)
		}
		return
	}
	if err := os.WriteFile(*out, h, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "genheader:", err)
		os.Exit(2)
	}
}

// cTypes maps the cgo types used in exported signatures to C. A *C.char
// parameter is always an input string in this ABI, hence const.
var cTypes = map[string]string{
	"*C.char":     "const char *",
	"**C.char":    "char **",
	"C.int":       "int",
	"C.uint64_t":  "uint64_t",
	"*C.uint64_t": "uint64_t *",
}

// Generate renders the header for the capi package in dir.
func Generate(dir string) ([]byte, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var funcs []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if proto, ok, err := prototype(d); err != nil {
					return nil, fmt.Errorf("%s: %w", fset.Position(d.Pos()), err)
				} else if ok {
					funcs = append(funcs, proto)
				}
			}
		}
	}
	var b bytes.Buffer
	b.WriteString(headerTop)
	b.WriteString("/* Status codes: every function returning int returns one of these. */\n")
	defs, err := defines(apierr.Table)
	if err != nil {
		return nil, err
	}
	for _, c := range defs {
		b.WriteString(c)
	}
	b.WriteString("\n")
	for _, f := range funcs {
		b.WriteString(f)
	}
	b.WriteString(freeDecl)
	b.WriteString(headerBottom)
	return b.Bytes(), nil
}

func typeString(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.StarExpr:
		return "*" + typeString(t.X)
	case *ast.SelectorExpr:
		return typeString(t.X) + "." + t.Sel.Name
	case *ast.Ident:
		return t.Name
	}
	return fmt.Sprintf("%T", e)
}

func cType(e ast.Expr) (string, error) {
	g := typeString(e)
	c, ok := cTypes[g]
	if !ok {
		return "", fmt.Errorf("no C type for %s", g)
	}
	return c, nil
}

func prototype(d *ast.FuncDecl) (string, bool, error) {
	if d.Doc == nil {
		return "", false, nil
	}
	var doc []string
	exported := ""
	for _, c := range d.Doc.List {
		if name, ok := strings.CutPrefix(c.Text, "//export "); ok {
			// The Go export tirastoreGo_X sits behind the C entry point
			// tirastore_X (capi/forkguard.c), which is what callers see.
			exported = strings.Replace(strings.TrimSpace(name), "tirastoreGo_", "tirastore_", 1)
			continue
		}
		doc = append(doc, strings.TrimPrefix(strings.TrimPrefix(c.Text, "//"), " "))
	}
	if exported == "" {
		return "", false, nil
	}
	for len(doc) > 0 && strings.TrimSpace(doc[len(doc)-1]) == "" {
		doc = doc[:len(doc)-1]
	}
	ret := "void"
	if d.Type.Results != nil && len(d.Type.Results.List) > 0 {
		var err error
		if ret, err = cType(d.Type.Results.List[0].Type); err != nil {
			return "", false, err
		}
	}
	var params []string
	for _, p := range d.Type.Params.List {
		ct, err := cType(p.Type)
		if err != nil {
			return "", false, err
		}
		for _, n := range p.Names {
			params = append(params, strings.TrimSuffix(ct, " ")+spaceFor(ct)+n.Name)
		}
	}
	if len(params) == 0 {
		params = []string{"void"}
	}
	var b strings.Builder
	b.WriteString("/*\n")
	for _, l := range doc {
		if l == "" {
			b.WriteString(" *\n")
		} else {
			b.WriteString(" * " + l + "\n")
		}
	}
	b.WriteString(" */\n")
	fmt.Fprintf(&b, "%s%s%s(%s);\n\n", ret, spaceFor(ret), exported, strings.Join(params, ", "))
	return b.String(), true, nil
}

// spaceFor puts a space between a type and a name unless the type ends in '*'.
func spaceFor(t string) string {
	if strings.HasSuffix(t, "*") {
		return ""
	}
	return " "
}

// freeDecl is tirastore_free, the one entry point written in C alone
// (capi/forkguard.c): a reply is malloc'ed memory, which free() releases
// without entering the Go runtime.
const freeDecl = `/*
 * tirastore_free releases a buffer the library returned through an out
 * parameter. NULL is ignored. Each buffer must be freed exactly once.
 */
void tirastore_free(const char *buf);

`

// okComment documents TIRASTORE_OK, the one status that is not an error
// and so not a row of the table.
const okComment = `success; *out holds {"result": ...}`

// defines renders TIRASTORE_OK and one macro per row of the error table:
// its code, and as comment its doc and the Python class it raises.
func defines(table []apierr.Entry) ([]string, error) {
	out := []string{define("TIRASTORE_OK", 0, okComment)}
	for _, e := range table {
		comment := fmt.Sprintf("%s (Python: %s)", e.Doc, e.Python)
		if e.Status == 0 || !strings.HasPrefix(e.CName, "TIRASTORE_ERR_") || strings.Contains(comment, "*/") {
			return nil, fmt.Errorf("apierr.Table row %s (%d): want a TIRASTORE_ERR_ name, a nonzero code and no */ in its text", e.CName, e.Status)
		}
		out = append(out, define(e.CName, e.Status, comment))
	}
	return out, nil
}

func define(name string, code int, comment string) string {
	return fmt.Sprintf("#define %-26s %3d /* %s */\n", name, code, comment)
}

const headerTop = `/*
 * tirastore.h — the C ABI of TiraStore, a shared measurement cache for
 * compiler autoschedulers (one SQLite file on Lustre/NFS, a hard-link lock).
 *
 * GENERATED by "go run ./capi/genheader" from the Go files of capi/ and
 * the error table of core/apierr; do not edit.
 *
 * Link with -ltirastore (libtirastore.so, built by build.sh / make build).
 *
 * Conventions (modelled on sqlite3.h):
 *  - A store is an opaque uint64_t handle from tirastore_open; 0 is never a
 *    valid handle and selects the standalone utilities in tirastore_call.
 *  - Arguments and results are UTF-8 JSON text. Every call that can fail
 *    returns a status code and, through "char **out", a JSON document:
 *    {"result": ...} on success, {"error": {"type", "message", "code"}} on
 *    failure. "type" names the Python exception class of the same error.
 *    A success may carry "warnings": a list of messages the caller should
 *    show (Python: TiraStoreWarning), e.g. records a read had to skip.
 *  - Ownership: every buffer returned through "out" is allocated by the
 *    library and owned by the caller, who frees it exactly once with
 *    tirastore_free. Input strings stay owned by the caller and are not
 *    retained after the call returns.
 *  - Threads: all functions may be called from any thread, concurrently,
 *    on the same or different handles.
 *  - Signals: while a call has waited more than 20 ms for a contended lock,
 *    the library handles SIGINT itself: every such wait returns
 *    TIRASTORE_ERR_INTERRUPTED (leaving no lock ticket file), the host's own
 *    SIGINT disposition is restored, and SIGINT is raised again so the host
 *    reacts as it would have. An ignored SIGINT stays ignored.
 *  - Address space: the library's Go runtime starts from the library's
 *    constructors (while dlopen runs, or before main for a program linked
 *    with -ltirastore) and reserves about 0.85 GiB of address space beyond
 *    the process's own, 1.35 GiB where it can, little of it touched. Under
 *    an address-space limit (RLIMIT_AS, ulimit -v) too small for that, the
 *    runtime aborts the process, and nothing can make the load fail
 *    instead: the library's own constructor, which runs first, writes to
 *    stderr why and the limit the process needs ("libtirastore: the
 *    address-space limit ..."). Under any such limit that constructor also
 *    caps glibc's malloc arenas at one (mallopt M_ARENA_MAX), unless
 *    MALLOC_ARENA_MAX or the tunable glibc.malloc.arena_max is set. A
 *    program that dlopens the library can check before, as the Python
 *    package does: docs/limits.md, "Address space".
 */
#ifndef TIRASTORE_H
#define TIRASTORE_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

`

const headerBottom = `#ifdef __cplusplus
}
#endif

#endif /* TIRASTORE_H */
`
