// Package identity reports who and where a record was written, in the exact
// text the original Python TiraStore stores, so that records from Go and
// Python workers are indistinguishable (hostname, username, ISO dates).
package identity

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"time"

	"github.com/tirastore/tirastore/core/environ"
)

// Hostname returns the host name as Python's socket.gethostname() does (the
// kernel's node name). Python raises if it cannot be read; this returns
// "unknown" instead, because a record or lock must still carry some name.
func Hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
}

// lookupUID is replaceable by tests.
var lookupUID = func(uid string) (string, error) {
	u, err := user.LookupId(uid)
	if err != nil {
		return "", err
	}
	return u.Username, nil
}

// Username returns the login name as Python's getpass.getuser() does: the
// first non-empty of LOGNAME, USER, LNAME, USERNAME, else the password
// database entry of the real uid. Where Python would raise (uid without an
// entry) it returns the uid in decimal, so containers with arbitrary uids
// still work.
//
// With cgo, os/user asks getpwuid_r and therefore sees LDAP/NSS users like
// Python does; a CGO_ENABLED=0 build only reads /etc/passwd.
func Username() string {
	for _, name := range []string{"LOGNAME", "USER", "LNAME", "USERNAME"} {
		if v := environ.Get(name); v != "" {
			return v
		}
	}
	uid := strconv.Itoa(os.Getuid())
	if name, err := lookupUID(uid); err == nil && name != "" {
		return name
	}
	return uid
}

// Owner names the owner of a file for an error message: "uid 65534
// (nobody)", or "uid 4242" when the user database has no entry for it. The
// uid comes first because it is what ls -n and the kernel show; the name
// is what a person recognises.
func Owner(uid uint32) string {
	s := "uid " + strconv.FormatUint(uint64(uid), 10)
	if name, err := lookupUID(strconv.FormatUint(uint64(uid), 10)); err == nil && name != "" {
		s += " (" + name + ")"
	}
	return s
}

// NowISO formats t like Python's datetime.now(timezone.utc).isoformat():
// UTC, microseconds truncated (Python floors the clock to microseconds) and
// omitted when zero, "+00:00" offset. Dates are compared as text when
// ordering, so the exact shape matters.
func NowISO(t time.Time) string {
	t = t.UTC()
	s := fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d",
		t.Year(), int(t.Month()), t.Day(), t.Hour(), t.Minute(), t.Second())
	if us := t.Nanosecond() / 1000; us != 0 {
		s += fmt.Sprintf(".%06d", us)
	}
	return s + "+00:00"
}
