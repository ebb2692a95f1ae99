package postgres

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tirastore/tirastore/core/tuning"
)

// TestOpenRetryWindow: an open gives up soon when nothing answers, and
// rides out as long as any call a server or pooler that is there but
// cannot serve yet (PgBouncer's failing server logins or full listen
// queue while hundreds of workers start, a server starting up).
func TestOpenRetryWindow(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want time.Duration
	}{
		{&pgconn.PgError{Severity: "FATAL", Code: "08P01", Message: "server login has been failing, try again later (server_login_retry)"}, tuning.ServerRetryFor},
		{&pgconn.PgError{Severity: "FATAL", Code: "57P03", Message: "the database system is starting up"}, tuning.ServerRetryFor},
		{fmt.Errorf("dial: %w", syscall.EAGAIN), tuning.ServerRetryFor}, // a full listen queue
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), tuning.ServerOpenRetryFor},
		{fmt.Errorf("dial: %w", syscall.ENOENT), tuning.ServerOpenRetryFor},
	} {
		if got := openRetryWindow(tc.err); got != tc.want {
			t.Errorf("openRetryWindow(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
