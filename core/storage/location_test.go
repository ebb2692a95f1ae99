package storage

import "testing"

func TestIsServerURL(t *testing.T) {
	for loc, want := range map[string]bool{
		"postgresql://u@h/db":        true,
		"POSTGRES://h/db":            true,
		"mysql://u:secret@h/db":      true,
		"sqlite+x://a":               true,
		"a.b-c://x":                  true,
		"cache.db":                   false,
		"/shared/cache.db":           false,
		"/a://b":                     false, // a directory "/a:" is a path
		"results 2://x":              false,
		"1abc://x":                   false,
		"://x":                       false,
		"":                           false,
		"postgresql:/one-slash/db":   false,
		"~/caches/postgresql://x.db": false,
	} {
		if got := IsServerURL(loc); got != want {
			t.Errorf("IsServerURL(%q) = %v, want %v", loc, got, want)
		}
	}
}
