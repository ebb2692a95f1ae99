package nodelocal

import "testing"

// TestNames: the documented rule, byte for byte (processes of older
// versions share these files): prefix + the first 24 hex digits of the
// SHA-256 of the lock path. The digest was computed independently
// (python3: hashlib.sha256(b"/d/cache.db.lock").hexdigest()[:24]).
func TestNames(t *testing.T) {
	const sum = "0865f59168e11e4f57bad865"
	for prefix, want := range map[string]string{
		GatePrefix:      "gate-" + sum,
		SpoolPrefix:     "spool-" + sum,
		ChangeLogPrefix: "changes-" + sum,
	} {
		if got := Name(prefix, "/d/cache.db.lock"); got != want {
			t.Errorf("Name(%q) = %q, want %q", prefix, got, want)
		}
	}
}

// TestSwitches: each speed-up is off exactly when its variable is "0";
// group commit also needs the node queue.
func TestSwitches(t *testing.T) {
	for _, tc := range []struct {
		queue, group, log   string
		wantQ, wantG, wantL bool
	}{
		{"", "", "", true, true, true},
		{"1", "1", "1", true, true, true},
		{"0", "", "", false, false, true},
		{"", "0", "", true, false, true},
		{"", "", "0", true, true, false},
		{"0", "1", "0", false, false, false},
		{"no", "off", "false", true, true, true}, // only "0" switches off
	} {
		t.Setenv("TIRASTORE_NODE_QUEUE", tc.queue)
		t.Setenv("TIRASTORE_GROUP_COMMIT", tc.group)
		t.Setenv("TIRASTORE_CHANGE_LOG", tc.log)
		if q, g, l := QueueEnabled(), GroupCommitEnabled(), ChangeLogEnabled(); q != tc.wantQ || g != tc.wantG || l != tc.wantL {
			t.Errorf("queue=%q group=%q log=%q: got %v %v %v, want %v %v %v",
				tc.queue, tc.group, tc.log, q, g, l, tc.wantQ, tc.wantG, tc.wantL)
		}
	}
}
