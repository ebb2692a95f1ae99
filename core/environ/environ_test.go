package environ

import "testing"

func TestGetUsesLookup(t *testing.T) {
	old := Lookup
	defer func() { Lookup = old }()
	Lookup = func(name string) (string, bool) { return "live-" + name, true }
	if got := Get("X"); got != "live-X" {
		t.Fatalf("Get = %q", got)
	}
	Lookup = func(string) (string, bool) { return "", false }
	if got := Get("X"); got != "" {
		t.Fatalf("unset: %q", got)
	}
}
