package sqlitefile

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tirastore/tirastore/core/apierr"
	"github.com/tirastore/tirastore/core/environ"
	"github.com/tirastore/tirastore/core/failpoint"
	"github.com/tirastore/tirastore/core/shareddir"
	"github.com/tirastore/tirastore/core/sqlite"
)

// # The kept connection
//
// The original opened a new SQLite connection for every operation and
// closed it before releasing the lock. On Lustre each open costs a dozen
// metadata round trips (path walk, stat of the database, journal and WAL
// names), so a Backend keeps one connection open across operations instead,
// and uses it only while holding the hard-link lock. That is safe because
// SQLite revalidates a connection at the start of every transaction: it
// checks for a hot journal (and rolls it back, which is right: we hold the
// lock, so its writer is dead), and compares the database header's change
// counter with the one it last saw, dropping its page cache if another
// process committed in between. Closing the connection outside the lock is
// safe too: in autocommit with no transaction open, SQLite writes nothing
// when it closes.
//
// What SQLite does not notice is a database file replaced by another one
// (renamed over, or deleted and recreated): the kept descriptors would go on
// reading the old inode. Each acquisition checks, through the header
// descriptor (fstat: no path lookup), that the file still has a name
// (link count > 0), and reopens by path if not. (A filesystem that answers
// fstat by the file's path, as some FUSE ones do, reports the new file's
// link count there, so a replacement goes unnoticed on it; replacing the
// database under running workers is not a supported operation anyway. The
// lock never decides by fstat: see internal/lock, Release.)
//
// Coherence: on local filesystems, Lustre and GPFS a read through a
// descriptor kept open sees what other nodes wrote (Lustre's distributed
// locks revoke stale cached pages). NFS promises that only at open
// (close-to-open consistency): a kept descriptor may read cached pages for
// up to the attribute-cache timeout. On NFS (and SMB), and whenever
// TIRASTORE_CONNECTION=fresh is set, a Backend therefore opens a fresh
// connection for every operation, as the original did, and never serves
// lookups from its cache without the lock.
type conn struct {
	db  *sqlite.DB
	hdr *os.File // read-only descriptor for header reads (cache validation)
}

// linked reports whether f's file still has a name (link count > 0): a
// database replaced by rename or removed and recreated has none.
func linked(f *os.File) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false, err
	}
	return st.Nlink > 0, nil
}

// Filesystem magic numbers (statfs f_type) of filesystems whose clients
// may serve stale data through a descriptor that stays open.
const (
	nfsSuperMagic  = 0x6969
	smbSuperMagic  = 0x517B
	cifsSuperMagic = 0xFF534D42
	smb2SuperMagic = 0xFE534D42
)

// freshConnections reports whether the database at path needs a fresh
// connection per operation (see "Coherence" above): on request
// (TIRASTORE_CONNECTION=fresh), on NFS (close-to-open consistency), and on
// SMB/CIFS.
func freshConnections(path string) bool {
	if environ.Get("TIRASTORE_CONNECTION") == "fresh" {
		return true
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	switch uint32(st.Type) {
	case nfsSuperMagic, smbSuperMagic, cifsSuperMagic, smb2SuperMagic:
		return true
	}
	return false
}

// header is the first 100 bytes of a database file.
type header [100]byte

// generation is the part of the header that changes with every committed
// write: the change counter and page count (24..31), the freelist (32..39),
// the schema cookie (40..43), and version-valid-for with the writer's
// SQLite version (92..99). SQLite increments the change counter in every
// transaction that modifies a rollback-journal database; the only way for
// it to come back to an earlier value is the rollback of a crashed writer,
// which restores exactly the earlier content too.
type generation [28]byte

func (h *header) generation() (g generation) {
	copy(g[:20], h[24:44])
	copy(g[20:], h[92:100])
	return g
}

// readHeader reads the database header through f. A file shorter than a
// header (a database being created) reads as zeros after its end.
func readHeader(f *os.File) (*header, error) {
	var h header
	n, err := f.ReadAt(h[:], 0)
	if err != nil && n < len(h) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return &h, nil
}

// connect returns the kept connection, checked for this acquisition, or a
// new one. The caller holds the lock.
func (s *Backend) connect() (*conn, error) {
	if c := s.conn; c != nil {
		ok, err := linked(c.hdr)
		if err == nil && ok && !s.fresh {
			if err := s.checkConn(c); err != nil {
				return nil, err
			}
			return c, nil
		}
		s.dropConn()
	}
	// The header descriptor first: it is opened without following a link
	// or blocking, and refused unless it is a regular file (a FIFO or a
	// link planted at the name of a database still to be created), with an
	// error naming what is there and whose; the VFS refuses the same for
	// SQLite's own open.
	hdr, _, err := shareddir.Open(s.path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	db, err := sqlite.Open(s.path, s.fence)
	if err != nil {
		hdr.Close()
		return nil, err
	}
	if failpoint.Enabled(failpoint.SQLiteExclusive) {
		// Negative control of the revalidation tests: an exclusive-mode
		// connection never rereads pages another process changed.
		if err := db.Pragma("PRAGMA locking_mode=EXCLUSIVE"); err != nil {
			db.Close()
			hdr.Close()
			return nil, err
		}
	}
	c := &conn{db: db, hdr: hdr}
	var writes func() uint64
	if s.fence != nil {
		writes = s.fence.Writes
	}
	s.conn = c
	if !s.fresh {
		s.cache.setFile(hdr, writes)
	}
	if err := s.checkConn(c); err != nil {
		s.dropConn()
		return nil, err
	}
	return c, nil
}

// checkConn reads the header before SQLite does, refuses a WAL-mode
// database with a clear message (the VFS cannot open one: see
// sqlite.CheckHeader), and starts the cache's operation with the
// generation it read: the one header read of a locked operation that does
// not write.
func (s *Backend) checkConn(c *conn) error {
	h, err := readHeader(c.hdr)
	if err != nil {
		return fmt.Errorf("read the database header: %w", err)
	}
	if err := sqlite.CheckHeader(s.path, h[:]); err != nil {
		return apierr.New(apierr.KindDatabase, "%v", err)
	}
	s.cache.Begin(h.generation())
	return nil
}

// dropConn closes the kept connection (after an error, or because the file
// was replaced) so that the next operation opens a new one.
func (s *Backend) dropConn() {
	if c := s.conn; c != nil {
		s.conn = nil
		s.cache.setFile(nil, nil)
		c.db.Close()
		c.hdr.Close()
	}
}
