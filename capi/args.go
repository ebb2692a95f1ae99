package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/tirastore/tirastore/core"
	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/operator"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/storage"
)

// args is the decoded JSON object of one call, with typed getters whose
// errors read like Python's and name the method and the argument
// ("TiraStore.lookup(): program_name must be str, not None").
type args struct {
	method string // as messages name it: see displayName
	obj    *pyjson.Object
}

// displayName is how error messages name a method: a store method as the
// Python method it is ("TiraStore.lookup"), a utility as the module
// function ("normalize_schedule"); tirastore_open's "TiraStore" (the
// constructor) stays as it is.
func displayName(method string) string {
	if name, ok := pythonNames[method]; ok {
		return name
	}
	if m, ok := methods[method]; ok && m.store {
		return "TiraStore." + method
	}
	return method
}

// pythonNames are the methods that messages name by the Python method
// they serve, when that is not TiraStore's method of the same name.
var pythonNames = map[string]string{
	"config_get":      "PersistentCache.get",
	"config_value":    "PersistentCache.get",
	"config_put":      "PersistentCache.put",
	"config_delete":   "PersistentCache.delete",
	"config_len":      "PersistentCache.__len__",
	"config_entries":  "PersistentCache.entries",
	"config_clear":    "PersistentCache.clear",
	"config_import":   "PersistentCache.import_json",
	"config_export":   "PersistentCache.export_json",
	"config_location": "PersistentCache",
}

// foreignKey marks a value the caller could not write as JSON: a binding
// sends {"\u0000type": "<its type name>"} in its place (the Python package
// does so for bytes, sets, complex numbers and any other object json cannot
// encode). Such an object is no dict: pyTypeName reports the type it names,
// so the getters' errors say which argument was wrong and what was given
// ("TiraStore.lookup(): program_source_code must be str, not bytes"), which
// only this layer can say, since only it knows what each argument must be.
const foreignKey = "\x00type"

// longKey marks a text too long to send: a binding sends
// {"\u0000type": "str", "\u0000bytes": <its length in bytes of UTF-8>} in
// place of a str longer than limits.MaxTextBytes (it asks the "limits"
// method for the figure), so that it need not encode the text to learn
// that it is refused; the parser puts the same marker in place of a longer
// string it reads (parseArgs), without building it. The getters report it
// as a ValueError naming the argument and the limit (tooLong).
const longKey = "\x00bytes"

// longMarker is the marker of a text of n bytes.
func longMarker(n int) any {
	o := pyjson.NewObjectCap(2)
	o.Set(foreignKey, "str")
	o.Set(longKey, n)
	return o
}

// longText is the length of the text a longKey marker stands for.
func longText(v any) (int64, bool) {
	o, ok := v.(*pyjson.Object)
	if !ok || o.Len() != 2 {
		return 0, false
	}
	t, _ := o.Get(foreignKey)
	n, _ := o.Get(longKey)
	var size int64
	switch x := n.(type) {
	case int:
		size = int64(x)
	case pyjson.Number:
		i, err := strconv.ParseInt(string(x), 10, 64)
		if err != nil {
			return 0, false
		}
		size = i
	default:
		return 0, false
	}
	return size, t == "str"
}

// foreignType returns the type name of a foreignKey marker (a longKey
// marker is one too: of a str).
func foreignType(o *pyjson.Object) (string, bool) {
	if _, ok := longText(o); ok {
		return "str", true
	}
	if o.Len() != 1 {
		return "", false
	}
	v, _ := o.Get(foreignKey)
	name, ok := v.(string)
	return name, ok
}

// dict is v as a JSON object, unless it is not one (or is a foreignKey marker).
func dict(v any) (*pyjson.Object, bool) {
	o, ok := v.(*pyjson.Object)
	if !ok {
		return nil, false
	}
	if _, foreign := foreignType(o); foreign {
		return nil, false
	}
	return o, true
}

func parseArgs(method string, data []byte) (*args, error) {
	method = displayName(method)
	a := &args{method: method, obj: pyjson.NewObject()}
	if len(data) == 0 {
		return a, nil
	}
	v, err := pyjson.ParseWith(data, pyjson.ParseOptions{MaxString: limits.TextLimit(), Long: longMarker})
	if err != nil {
		return nil, misuse("%s(): arguments are not valid JSON: %v", method, err)
	}
	obj, ok := dict(v)
	if !ok {
		return nil, misuse("%s(): arguments must be a JSON object, not %s", method, pyTypeName(v))
	}
	a.obj = obj
	return a, nil
}

// pyTypeName names a decoded JSON value by the Python type it came from.
func pyTypeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		return "bool"
	case string:
		return "str"
	case pyjson.Number:
		if x.IsInt() {
			return "int"
		}
		return "float"
	case []any:
		return "list"
	case *pyjson.Object:
		if name, ok := foreignType(x); ok {
			return name
		}
		return "dict"
	}
	return fmt.Sprintf("%T", v)
}

func (a *args) typeErr(name, want string, v any) error {
	if n, ok := longText(v); ok {
		return a.tooLong(name, n)
	}
	return &core.Error{Kind: core.KindType, Message: fmt.Sprintf("%s(): %s must be %s, not %s", a.method, name, want, pyTypeName(v))}
}

// tooLong is the error of argument name, a text of n bytes, longer than
// any the engine takes.
func (a *args) tooLong(name string, n int64) error {
	return core.TextTooLong(a.method+"(): "+name, n)
}

func (a *args) get(name string) (any, bool) { return a.obj.Get(name) }

// str is a required string argument.
func (a *args) str(name string) (string, error) {
	v, ok := a.get(name)
	if !ok {
		return "", &core.Error{Kind: core.KindType, Message: fmt.Sprintf("%s(): missing required argument %s", a.method, name)}
	}
	s, ok := v.(string)
	if !ok {
		return "", a.typeErr(name, "str", v)
	}
	return s, nil
}

// optStr is a string argument that may be absent or null ("" then).
func (a *args) optStr(name string) (string, error) {
	v, ok := a.get(name)
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", a.typeErr(name, "str or None", v)
	}
	return s, nil
}

// namespace is the config methods' optional namespace argument: a str,
// "" when absent (the namespace of every entry written before namespaces).
func (a *args) namespace() (string, error) {
	v, ok := a.get("namespace")
	if !ok {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", a.typeErr("namespace", "str", v)
	}
	return s, nil
}

// sharing is a storage.Sharing by its name ("all", "group", "private"),
// and whether one was given; absent or null: the original's, all.
func (a *args) sharing(name string) (storage.Sharing, bool, error) {
	s, err := a.optStr(name)
	if err != nil || s == "" {
		return storage.ShareAll, false, err
	}
	sh, ok := storage.ParseSharing(s)
	if !ok {
		return 0, false, &core.Error{Kind: core.KindValue, Message: fmt.Sprintf("%s(): %s must be one of %q, got %q",
			a.method, name, storage.SharingNames(), s)}
	}
	return sh, true, nil
}

func (a *args) boolean(name string, def bool) (bool, error) {
	v, ok := a.get(name)
	if !ok {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, a.typeErr(name, "bool", v)
	}
	return b, nil
}

func (a *args) integer(name string, def int64) (int64, error) {
	v, ok := a.get(name)
	if !ok {
		return def, nil
	}
	n, ok := v.(pyjson.Number)
	if !ok || !n.IsInt() {
		return 0, a.typeErr(name, "int", v)
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		return 0, &core.Error{Kind: core.KindValue, Message: fmt.Sprintf("%s(): %s is out of range: %s", a.method, name, n)}
	}
	return i, nil
}

// seconds is an optional duration in (fractional) seconds: nil when
// absent or null (the engine's default; core/options.go).
func (a *args) seconds(name string) (*time.Duration, error) {
	f, err := a.finite(name, "a finite number of seconds", 1e9)
	if f == nil || err != nil {
		return nil, err
	}
	return core.Seconds(*f), nil
}

// strMap is an optional object of strings (absent or null: nil).
func (a *args) strMap(name string) (map[string]string, error) {
	v, ok := a.get(name)
	if !ok || v == nil {
		return nil, nil
	}
	obj, ok := v.(*pyjson.Object)
	if !ok {
		return nil, a.typeErr(name, "dict of str", v)
	}
	out := make(map[string]string, obj.Len())
	for _, k := range obj.Keys() {
		x, _ := obj.Get(k)
		s, ok := x.(string)
		if !ok {
			return nil, a.typeErr(fmt.Sprintf("%s[%q]", name, k), "str", x)
		}
		out[k] = s
	}
	return out, nil
}

// number is an optional finite number: nil when absent or null.
func (a *args) number(name string) (*float64, error) {
	return a.finite(name, "a finite number", math.Inf(1))
}

// finite is an optional number (nil when absent or null) that must be
// finite and at most bound in magnitude, what naming it in the error.
func (a *args) finite(name, what string, bound float64) (*float64, error) {
	v, ok := a.get(name)
	if !ok || v == nil {
		return nil, nil
	}
	n, ok := v.(pyjson.Number)
	if !ok {
		return nil, a.typeErr(name, "float", v)
	}
	f, err := n.Float64()
	if err != nil || !n.IsFinite() {
		return nil, &core.Error{Kind: core.KindValue, Message: fmt.Sprintf("%s(): %s must be %s, got %s", a.method, name, what, n)}
	}
	if math.Abs(f) > bound {
		return nil, &core.Error{Kind: core.KindValue, Message: fmt.Sprintf("%s(): %s must be %s of at most %g in magnitude, got %s", a.method, name, what, bound, n)}
	}
	return &f, nil
}

// times is execution_times: null, or a list of numbers.
func (a *args) times(obj *pyjson.Object, prefix string) ([]pyjson.Number, error) {
	v, _ := obj.Get("execution_times")
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, a.typeErr(prefix+"execution_times", "a list of numbers or None", v)
	}
	out := make([]pyjson.Number, len(list))
	for i, x := range list {
		n, ok := x.(pyjson.Number)
		if !ok {
			return nil, a.typeErr(fmt.Sprintf("%sexecution_times[%d]", prefix, i), "int or float", x)
		}
		out[i] = n
	}
	return out, nil
}

func (a *args) measurement(obj *pyjson.Object, prefix string) (core.Measurement, error) {
	var m core.Measurement
	sched, ok := obj.Get("tiralib_schedule_string")
	if !ok {
		return m, &core.Error{Kind: core.KindType, Message: fmt.Sprintf("%s(): missing required argument %stiralib_schedule_string", a.method, prefix)}
	}
	if m.Schedule, ok = sched.(string); !ok {
		return m, a.typeErr(prefix+"tiralib_schedule_string", "str", sched)
	}
	out, err := a.outcome(obj, prefix)
	out.Schedule = m.Schedule
	return out, err
}

// outcome is a measurement's is_legal, execution_times and, for a result
// without a time of its own, censored and timed_out_after (its schedule
// left empty: a claim knows it).
func (a *args) outcome(obj *pyjson.Object, prefix string) (core.Measurement, error) {
	var m core.Measurement
	legal, ok := obj.Get("is_legal")
	if !ok {
		return m, &core.Error{Kind: core.KindType, Message: fmt.Sprintf("%s(): missing required argument %sis_legal", a.method, prefix)}
	}
	if m.IsLegal, ok = legal.(bool); !ok {
		return m, a.typeErr(prefix+"is_legal", "bool", legal)
	}
	var err error
	if m.ExecutionTimes, err = a.times(obj, prefix); err != nil {
		return m, err
	}
	if c, _ := obj.Get("censored"); c != nil {
		if m.Censored, ok = c.(string); !ok {
			return m, a.typeErr(prefix+"censored", "str or None", c)
		}
	}
	if t, _ := obj.Get("timed_out_after"); t != nil {
		n, ok := t.(pyjson.Number)
		if !ok {
			return m, a.typeErr(prefix+"timed_out_after", "int or float", t)
		}
		if m.TimedOutAfter, err = n.Float64(); err != nil || !n.IsFinite() {
			return m, &core.Error{Kind: core.KindValue, Message: fmt.Sprintf("%s(): %stimed_out_after must be a finite number, got %s", a.method, prefix, n)}
		}
	}
	return m, nil
}

// strList is a required list of strings (lookup_many's schedules).
func (a *args) strList(name string) ([]string, error) {
	v, ok := a.get(name)
	if !ok {
		return nil, &core.Error{Kind: core.KindType, Message: fmt.Sprintf("%s(): missing required argument %s", a.method, name)}
	}
	list, ok := v.([]any)
	if !ok {
		return nil, a.typeErr(name, "a list of str", v)
	}
	out := make([]string, len(list))
	for i, x := range list {
		if out[i], ok = x.(string); !ok {
			return nil, a.typeErr(fmt.Sprintf("%s[%d]", name, i), "str", x)
		}
	}
	return out, nil
}

// schedules is record_many's list of {tiralib_schedule_string, is_legal,
// execution_times} objects.
func (a *args) schedules(name string) ([]core.Measurement, error) {
	v, ok := a.get(name)
	if !ok {
		return nil, &core.Error{Kind: core.KindType, Message: fmt.Sprintf("%s(): missing required argument %s", a.method, name)}
	}
	list, ok := v.([]any)
	if !ok {
		return nil, a.typeErr(name, "a list of dicts", v)
	}
	out := make([]core.Measurement, len(list))
	for i, x := range list {
		obj, ok := dict(x)
		if !ok {
			return nil, a.typeErr(fmt.Sprintf("%s[%d]", name, i), "dict", x)
		}
		m, err := a.measurement(obj, "")
		if err != nil { // again, for the error naming the entry (not built for every entry)
			_, err = a.measurement(obj, fmt.Sprintf("%s[%d].", name, i))
			return nil, err
		}
		out[i] = m
	}
	return out, nil
}

// check rejects keys outside params, before anything runs: a typo in a C
// caller's JSON must not silently fall back to a default.
func (a *args) check(params []string) error {
	for _, k := range a.obj.Keys() {
		if !slices.Contains(params, k) {
			return &core.Error{Kind: core.KindType, Message: fmt.Sprintf("%s() got an unexpected argument %q", a.method, k)}
		}
	}
	return nil
}

// jsonValue is argument name as JSON text, for a value the engine stores
// as it is (a config entry's): compact, ensure_ascii, as json.dumps writes
// it with separators (",", ":"). A value the binding could not write as JSON
// (a foreignKey marker anywhere inside) is a TypeError naming what (the
// entry's key, say) and the type.
func (a *args) jsonValue(name, what string) (string, error) {
	v, ok := a.get(name)
	if !ok {
		return "", &core.Error{Kind: core.KindType, Message: fmt.Sprintf("%s(): missing argument %s", a.method, name)}
	}
	if m, bad := foreignIn(v); bad {
		if n, long := longText(m); long {
			return "", a.tooLong("a string in the value of "+what, n)
		}
		t, _ := foreignType(m)
		return "", &core.Error{Kind: core.KindType, Message: fmt.Sprintf("%s(): the value of %s is not JSON serializable: it holds a %s", a.method, what, t)}
	}
	b, err := pyjson.Marshal(v, pyjson.Compact)
	if err != nil {
		return "", &core.Error{Kind: core.KindValue, Message: fmt.Sprintf("%s(): the value of %s cannot be stored: %v", a.method, what, err), Err: err}
	}
	return string(b), nil
}

// foreignIn finds a foreignKey marker in v.
func foreignIn(v any) (*pyjson.Object, bool) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			if m, ok := foreignIn(e); ok {
				return m, true
			}
		}
	case *pyjson.Object:
		if _, ok := foreignType(x); ok {
			return x, true
		}
		for _, k := range x.Keys() {
			e, _ := x.Get(k)
			if m, ok := foreignIn(e); ok {
				return m, true
			}
		}
	}
	return nil, false
}

// journalChoice is check's journal argument: None, "apply" or "discard"
// (operator.JournalChoice).
func (a *args) journalChoice(name string) (operator.JournalChoice, error) {
	s, err := a.optStr(name)
	switch {
	case err != nil:
		return 0, err
	case s == "":
		return operator.JournalReport, nil
	case s == "apply":
		return operator.JournalApply, nil
	case s == "discard":
		return operator.JournalDiscard, nil
	}
	return 0, &core.Error{Kind: core.KindValue, Message: fmt.Sprintf("%s(): %s must be None, 'apply' or 'discard', got %q", a.method, name, s)}
}
