package storage

import "strings"

// IsServerURL reports whether location, a database's location as a caller
// gives it, is a server's URL rather than a file path: "<scheme>://..."
// with an RFC 3986 scheme (a letter, then letters, digits, "+", "-",
// "."), so that a path such as "results://x" or "/a://b" is a URL only
// when it could be one. It is the one place that decides: the API layer
// then opens the backend that serves the scheme (core's openBackend:
// postgres.IsURL) and refuses any other URL, and whatever concerns files
// only (the lock, output paths, a PersistentCache's directory) leaves
// every URL alone.
func IsServerURL(location string) bool {
	scheme, _, ok := strings.Cut(location, "://")
	if !ok || scheme == "" {
		return false
	}
	for i, r := range scheme {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return true
}
