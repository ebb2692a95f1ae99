package pyjson

// Object is an ordered JSON object with Python dict semantics: Set on an
// existing key replaces the value and keeps the key's original position.
//
// It exists because Python dicts remember insertion order and json.dumps
// without sort_keys writes keys in that order; a Go map would lose it.
// The zero value is an empty object ready to use. A nil *Object reads as
// empty (Get, Keys, Len, Range) and Marshal writes it as {}.
// An Object is not safe for concurrent mutation.
type Object struct {
	keys  []string
	vals  []any
	index map[string]int // key -> position in keys/vals; nil while small
}

// smallObject is the size up to which keys are found by a linear scan and
// no index map is kept: records, replies and lock files are objects of 1 to
// 16 keys (a lookup's reply has 9), for which building a map cost more than
// the rest of encoding.
const smallObject = 16

// find returns the position of key.
func (o *Object) find(key string) (int, bool) {
	if o.index != nil {
		i, ok := o.index[key]
		return i, ok
	}
	for i, k := range o.keys {
		if k == key {
			return i, true
		}
	}
	return 0, false
}

// NewObject returns an empty Object, like Python's {}.
func NewObject() *Object { return &Object{} }

// NewObjectCap is NewObject with room for n keys, for encoders that know
// the shape of what they build (a reply, a record): no growing on Set.
func NewObjectCap(n int) *Object {
	return &Object{keys: make([]string, 0, n), vals: make([]any, 0, n)}
}

// Set stores v under key, like d[key] = v: a new key goes last, an existing
// key keeps its position and gets the new value.
func (o *Object) Set(key string, v any) {
	if i, ok := o.find(key); ok {
		o.vals[i] = v
		return
	}
	o.keys = append(o.keys, key)
	o.vals = append(o.vals, v)
	switch {
	case o.index != nil:
		o.index[key] = len(o.keys) - 1
	case len(o.keys) > smallObject:
		o.index = make(map[string]int, 2*len(o.keys))
		for i, k := range o.keys {
			o.index[k] = i
		}
	}
}

// Get returns the value stored under key and whether the key is present,
// like d.get(key) plus `key in d`.
func (o *Object) Get(key string) (any, bool) {
	if o == nil {
		return nil, false
	}
	i, ok := o.find(key)
	if !ok {
		return nil, false
	}
	return o.vals[i], true
}

// Keys returns a copy of the keys in insertion order, like list(d).
func (o *Object) Keys() []string {
	if o == nil {
		return nil
	}
	return append([]string(nil), o.keys...)
}

// Len returns the number of keys, like len(d).
func (o *Object) Len() int {
	if o == nil {
		return 0
	}
	return len(o.keys)
}

// Delete removes key and reports whether it was present, like
// d.pop(key, None); the other keys keep their relative order, so setting
// the key again appends it at the end, as in Python.
func (o *Object) Delete(key string) bool {
	if o == nil {
		return false
	}
	i, ok := o.find(key)
	if !ok {
		return false
	}
	if o.index != nil {
		delete(o.index, key)
	}
	copy(o.keys[i:], o.keys[i+1:])
	copy(o.vals[i:], o.vals[i+1:])
	o.keys[len(o.keys)-1] = ""
	o.vals[len(o.vals)-1] = nil
	o.keys = o.keys[:len(o.keys)-1]
	o.vals = o.vals[:len(o.vals)-1]
	if o.index != nil {
		for j := i; j < len(o.keys); j++ {
			o.index[o.keys[j]] = j
		}
	}
	return true
}

// Range calls fn for each key and value in insertion order, like
// d.items(), until fn returns false. fn must not modify o.
func (o *Object) Range(fn func(key string, v any) bool) {
	if o == nil {
		return
	}
	for i, k := range o.keys {
		if !fn(k, o.vals[i]) {
			return
		}
	}
}
