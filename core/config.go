package core

import (
	"context"
	"strings"
	"time"

	"github.com/tirastore/tirastore/core/identity"
	"github.com/tirastore/tirastore/core/internal/input"
	"github.com/tirastore/tirastore/core/limits"
	"github.com/tirastore/tirastore/core/pyjson"
	"github.com/tirastore/tirastore/core/storage"
)

// # The kernel-config cache
//
// ejKernel's PersistentCache remembers, for kernel autotuners, the best
// configuration found for (device, operation, call signature). Here its
// entries live in a table of the TiraStore database (core/sqlite
// configs.go), under the same lock as the records, so that every put is a
// small transaction that no other process's put can undo, and a get sees
// every other process's puts at once. The key is the seed's,
// "device|op_id|call_key", within a namespace: one database holds many
// caches (ejKernel's one per operation), each its own namespace, "" the
// default and the namespace of every entry written before namespaces
// existed. The value is any JSON value, NaN and the infinities included,
// as Python's json writes them. The CPU check of the records does not
// apply: a configuration names its device in its key.
//
// # Device fingerprints
//
// ejKernel names a device by its fingerprint, "device_kind|platform
// version": a GPU's names the hardware ("NVIDIA A100-SXM4-80GB|cuda
// 12.2"), so the key alone keeps configurations of one GPU from another;
// a CPU's does not ("cpu|"), and a configuration tuned on one CPU would
// be served on any other. So every put keeps the run context it was
// tuned in (core/runctx, as records do; storage.ConfigEntry.Context), and
// a get of a CPU device (its fingerprint's kind is "cpu") refuses an
// entry tuned on another CPU model: a miss, to tune here. An entry of
// unknown context (put before contexts, or imported from a JSON file)
// is served as before. Asked (otherDevices), a get serves any entry of
// the key, and on a miss the most recent entry of the same operation and
// call signature tuned under another fingerprint, to start from.

// ConfigKey is the seed's key of an entry: "device|op_id|call_key".
func ConfigKey(device, opID, callKey string) string {
	return strings.Join([]string{device, opID, callKey}, "|")
}

// ConfigEntry is one entry of the kernel-config cache.
type ConfigEntry storage.ConfigEntry

// ConfigFilter selects the entries ConfigEntries lists: those of one
// namespace, or of every namespace (AllNamespaces), of a device and an
// operation ("" matches any).
type ConfigFilter = storage.ConfigFilter

// name is how messages name the entry (storage.ConfigName).
func (e *ConfigEntry) name() string { return storage.ConfigName(e.Namespace, e.Key) }

// checkConfigRef validates a namespace and the three parts of a key.
func checkConfigRef(namespace, device, opID, callKey string) error {
	return CheckConfigRef(namespace, device, opID, callKey)
}

// CheckConfigRef validates the namespace and the three parts of a key, as
// every config call does, for a binding that answers without a database
// (a cache whose database does not exist yet): the same errors either way.
func CheckConfigRef(namespace, device, opID, callKey string) error {
	return input.Texts("namespace", namespace, "device", device, "op_id", opID, "call_key", callKey)
}

// ConfigGet returns the entry of (device, opID, callKey) in namespace, or
// nil: from the backend's in-process cache, without the lock, when it can
// prove the entry current (a header read), as a lookup. A value stored
// nested deeper than limits.MaxValueDepth is returned (its reply carries an
// error in its place, TooDeep: see "Limits of stored values").
//
// A CPU device's entry tuned on another CPU model is refused (see "Device
// fingerprints") unless otherDevices, which also serves, on a miss, the
// most recent entry of (opID, callKey) under another device.
func (s *Store) ConfigGet(ctx context.Context, namespace, device, opID, callKey string, otherDevices bool) (*ConfigEntry, error) {
	if err := checkConfigRef(namespace, device, opID, callKey); err != nil {
		return nil, err
	}
	e, err := s.be.ConfigGet(ctx, namespace, ConfigKey(device, opID, callKey))
	if err != nil {
		return nil, err
	}
	if otherDevices {
		if e == nil {
			return s.configOfAnotherDevice(ctx, namespace, opID, callKey)
		}
		return (*ConfigEntry)(e), nil
	}
	if e == nil {
		return nil, nil
	}
	if isCPUDevice(device) && e.Context != "" {
		if ok, err := s.tunedOnThisCPU(e.Context); err != nil || !ok {
			return nil, err
		}
	}
	return (*ConfigEntry)(e), nil
}

// isCPUDevice reports whether device, a fingerprint ("cpu|..."), a name
// ("cpu:0") or a kind ("cpu"), names a CPU, which says nothing of its
// model.
func isCPUDevice(device string) bool {
	kind, _, _ := strings.Cut(device, "|")
	kind, _, _ = strings.Cut(kind, ":")
	return strings.EqualFold(strings.TrimSpace(kind), "cpu")
}

// tunedOnThisCPU reports whether the context fp has this store's CPU
// model (an unreadable context: no, it cannot be told apart).
func (s *Store) tunedOnThisCPU(fp string) (bool, error) {
	ours, ourFP := s.capture.Current()
	if fp == ourFP {
		return true, nil
	}
	found, err := s.contexts.resolveOwn(s, []string{fp})
	if err != nil {
		return false, err
	}
	theirs := found[fp]
	return theirs != nil && theirs.CPUModel == ours.CPUModel, nil
}

// configOfAnotherDevice is the most recent entry of (opID, callKey) in
// namespace, of any device, or nil.
func (s *Store) configOfAnotherDevice(ctx context.Context, namespace, opID, callKey string) (*ConfigEntry, error) {
	var best *storage.ConfigEntry
	err := s.be.View(ctx, "config get", func(r storage.Reader) error {
		best = nil
		return r.EachConfig(storage.ConfigFilter{Namespace: namespace, OpID: opID}, func(e *storage.ConfigEntry) error {
			if e.CallKey == callKey && (best == nil || e.UpdateDate > best.UpdateDate) {
				best = e
			}
			return nil
		})
	})
	if err != nil || best == nil {
		return nil, err
	}
	return (*ConfigEntry)(best), nil
}

// ConfigValue is ConfigGet for the bindings, which decode the value: one
// stored nested deeper than limits.MaxValueDepth is a KindValue error
// naming the entry.
func (s *Store) ConfigValue(ctx context.Context, namespace, device, opID, callKey string, otherDevices bool) (*ConfigEntry, error) {
	e, err := s.ConfigGet(ctx, namespace, device, opID, callKey, otherDevices)
	if e != nil {
		if msg := e.TooDeep(); msg != "" {
			return nil, newError(KindValue, "%s", msg)
		}
	}
	return e, err
}

// TooDeep is the message about e's value when it is stored nested deeper
// than limits.MaxValueDepth, else "": ConfigValue's error, and what a
// listing's reply carries in the value's place.
func (e *ConfigEntry) TooDeep() string {
	d, over := limits.TooDeep(e.ValueJSON)
	if !over {
		return ""
	}
	return tooDeepStored("config "+e.name()+": the value", d, "delete the entry or put a new value")
}

// ConfigPut stores valueJSON (one JSON value) for (device, opID, callKey)
// in namespace in one transaction and reports whether it wrote: with
// overwrite the last writer wins, as in the seed; without, the first
// value stays and the call returns false, so that concurrent tuners agree
// on one result.
func (s *Store) ConfigPut(ctx context.Context, namespace, device, opID, callKey, valueJSON string, overwrite bool) (bool, error) {
	if err := checkConfigRef(namespace, device, opID, callKey); err != nil {
		return false, err
	}
	key := ConfigKey(device, opID, callKey)
	name := storage.ConfigName(namespace, key)
	if err := input.Text("value", valueJSON); err != nil {
		return false, err
	}
	if d, over := limits.TooDeep(valueJSON); over {
		return false, TooDeepToStore("config "+name+": the value", d)
	}
	if _, err := pyjson.Parse([]byte(valueJSON)); err != nil {
		return false, wrapError(KindValue, err, "config %s: the value is not one JSON value: %v", name, err)
	}
	stamp := identity.NowISO(time.Now())
	fp, js, _ := s.capture.Capture(0)
	e := &storage.ConfigEntry{Namespace: namespace, Key: key, Device: device, OpID: opID, CallKey: callKey,
		ValueJSON: valueJSON, Hostname: s.hostname, Username: s.username, CreationDate: stamp, UpdateDate: stamp,
		Context: fp}
	var wrote bool
	err := s.be.Update(ctx, "config put", func(w storage.Writer) (err error) {
		if wrote, err = w.PutConfig(e, overwrite); err != nil || !wrote {
			return err
		}
		return w.PutContext(storage.RunContext{Fingerprint: fp, JSON: js})
	})
	return wrote, err
}

// ConfigDelete removes the entry of (device, opID, callKey) in namespace
// and reports whether there was one.
func (s *Store) ConfigDelete(ctx context.Context, namespace, device, opID, callKey string) (bool, error) {
	if err := checkConfigRef(namespace, device, opID, callKey); err != nil {
		return false, err
	}
	var found bool
	err := s.be.Update(ctx, "config delete", func(w storage.Writer) (err error) {
		found, err = w.DeleteConfig(namespace, ConfigKey(device, opID, callKey))
		return err
	})
	return found, err
}

// ConfigLen is the number of entries of namespace.
func (s *Store) ConfigLen(ctx context.Context, namespace string) (n int64, err error) {
	if err := input.Text("namespace", namespace); err != nil {
		return 0, err
	}
	err = s.be.View(ctx, "config len", func(r storage.Reader) (err error) {
		n, err = r.CountConfigs(namespace)
		return err
	})
	return n, err
}

// ConfigEntries lists the entries f selects, by namespace then key.
func (s *Store) ConfigEntries(ctx context.Context, f ConfigFilter) ([]*ConfigEntry, error) {
	if err := input.Texts("namespace", f.Namespace, "device", f.Device, "op_id", f.OpID); err != nil {
		return nil, err
	}
	out := []*ConfigEntry{}
	err := s.be.View(ctx, "config entries", func(r storage.Reader) error {
		out = out[:0]
		return r.EachConfig(f, func(e *storage.ConfigEntry) error {
			out = append(out, (*ConfigEntry)(e))
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ConfigClear removes every entry of namespace and returns how many there
// were.
func (s *Store) ConfigClear(ctx context.Context, namespace string) (n int64, err error) {
	if err := input.Text("namespace", namespace); err != nil {
		return 0, err
	}
	err = s.be.Update(ctx, "config clear", func(w storage.Writer) (err error) {
		n, err = w.ClearConfigs(namespace)
		return err
	})
	return n, err
}
