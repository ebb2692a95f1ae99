/*
** vfs.c: the "tirastore" SQLite VFS, a thin shim over SQLite's built-in
** "unix-none" VFS (the unix VFS without POSIX advisory locks). vfs.go explains
** why it exists and why each removed system call is safe; in short, per
** transaction it drops every path-based call except stat(journal),
** open(journal) and unlink(journal):
**
**   - xAccess(<db>-wal, EXISTS) answers "no" without a stat: this VFS cannot
**     run WAL at all (no xShmMap), and the engine refuses WAL-mode files.
**   - main database files are unix-none files, wrapped only to carry the
**     per-connection state below and to close it with the database;
**   - rollback journals are plain POSIX files implemented here: created with
**     the database's mode (and owner, as root) of the moment, from an fstat
**     of a descriptor kept per connection, and made durable by fsync on a directory descriptor kept
**     open with the connection instead of open(dir)+fsync+close each time.
**
**   - fencing (fence.go): every write, truncate and sync of the database
**     or its journal, every open of the journal and every delete of it is
**     refused once the connection's holder may have lost the hard-link lock
**     (its tenure ran out and could not be renewed).
**
**   - the shared directory (trust.go): no open SQLite makes can block or
**     follow a link (the unix VFS's open system call is replaced by one
**     that adds O_NONBLOCK and refuses FIFOs, sockets and block devices),
**     and a journal this VFS did not just create is used only if the
**     journal rule (tira_journal_verdict) trusts it: a journal planted by
**     another user is never rolled back.
**
** Everything else (temp files, xFullPathname, ...) is unix-none's.
** Every call runs under the caller's hard-link lock; SQLite serializes the
** calls on one connection, and no state is shared between connections but
** the list of open databases (tiraDbList), which xDelete searches.
*/
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "vfs_sqlite3.h"

#ifndef O_LARGEFILE
# define O_LARGEFILE 0
#endif
#ifndef O_CLOEXEC
# define O_CLOEXEC 0
#endif

/* The extended result code of an open that the shared-directory checks
** refused (a FIFO or link at the journal's name, an untrusted journal):
** SQLITE_CANTOPEN with a code of our own, which the pager passes on
** unchanged (it special-cases only the plain SQLITE_CANTOPEN) and the Go
** side recognises to explain it (trust.go). Keep in sync with refusedCode. */
#define TIRA_REFUSED (SQLITE_CANTOPEN | (64<<8))

/* Verdicts of tira_journal_verdict; keep in sync with trust.go. */
#define TIRA_JOURNAL_TRUSTED      0
#define TIRA_JOURNAL_NOT_REGULAR  1  /* a FIFO, a link, a directory, ... */
#define TIRA_JOURNAL_LINKS        2  /* more than one hard link */
#define TIRA_JOURNAL_MODE         3  /* writable by more users than the database */
#define TIRA_JOURNAL_OWNER        4  /* written by a user who could not write the database */

/* Values of SQLite's unix VFS that this file mirrors. */
#define TIRA_SECTOR_SIZE   4096  /* SQLITE_DEFAULT_SECTOR_SIZE */
#define TIRA_MIN_FD        3     /* SQLITE_MINIMUM_FILE_DESCRIPTOR */
#define TIRA_DEFAULT_PERM  0644  /* SQLITE_DEFAULT_FILE_PERMISSIONS */

/* Round up to a multiple of 8, the alignment SQLite gives sqlite3_file. */
#define TIRA_ROUND8(x) (((x) + 7) & ~7)

/* The tenure of one store's hard-link lock, shared by its successive
** connections; fence.go allocates it and explains the protocol. */
typedef struct TiraFence {
  _Atomic sqlite3_int64 deadline;  /* CLOCK_MONOTONIC ns: writes before it need no renewal */
  _Atomic int lost;                /* set: refuse everything until the next tenure */
  uintptr_t renew;                 /* the Go renewer (a runtime/cgo.Handle) */
  _Atomic unsigned long long writes; /* writes and truncates of the database file */
} TiraFence;

/* Exported by fence.go: confirm the lock again (and extend the deadline);
** returns 1 if the lock is still ours. */
extern int tirastoreFenceRenew(uintptr_t h);

/* A main database file: our header followed by unix-none's own file. */
typedef struct TiraDb {
  sqlite3_file base;   /* pMethods = &tiraDbMethods */
  sqlite3_file *real;  /* unix-none's file, stored right after this struct */
  const char *zPath;   /* the name given to xOpen; valid until xClose */
  const char *zJournal;/* the pager's journal name (sqlite3_filename_journal) */
  TiraFence *fence;    /* from the URI parameter "tirafence", or 0: unfenced */
  struct TiraDb *pNext, *pPrev;  /* tiraDbList, for xDelete */
  int haveFds;         /* dbFd and dirFd below were opened */
  int dbFd;            /* the database file, read-only, for fstat; or -1 */
  int dirFd;           /* directory of the database, or -1 */
  /* Read at each journal open (tiraDbLoadInfo): */
  mode_t mode;         /* permission bits of the database file */
  uid_t uid;           /* owner of the database file */
  gid_t gid;           /* group of the database file */
  mode_t dirMode;      /* permission bits of its directory (0777 if unknown) */
} TiraDb;

/* A rollback journal, implemented here with plain POSIX calls. */
typedef struct TiraJrnl {
  sqlite3_file base;   /* pMethods = &tiraJrnlMethods */
  TiraFence *fence;    /* the database's fence, or 0 */
  int fd;              /* the journal */
  int dirFd;           /* the database's kept directory descriptor, or -1 */
  int dirSync;         /* created by this open: sync the directory once */
  const char *zPath;   /* the name given to xOpen; valid until xClose */
} TiraJrnl;

static sqlite3_vfs *origVfs;          /* "unix-none" */
static sqlite3_vfs tiraVfs;           /* "tirastore", a copy of it, edited */
static const sqlite3_io_methods tiraDbMethods;
static const sqlite3_io_methods tiraJrnlMethods;

/* ---------------------------------------------------------------- helpers */

/* Open databases of this VFS, so that xDelete, which is given only a name,
** finds the fence of the database whose journal it deletes. */
static TiraDb *tiraDbList;
static pthread_mutex_t tiraDbListMutex = PTHREAD_MUTEX_INITIALIZER;

#ifdef TIRASTORE_FAILPOINTS
/* Exported by vfs_failpoints.go: whether the switch zName is on. */
extern int tirastoreFailpointOn(char *zName);
/* The negative controls of the shared-directory tests turn the checks off:
** "shareddir-trust" (no O_NONBLOCK, no kind check) and "journal-trust" (every
** journal rolled back, as before). Test builds only. */
static int tiraTrusting(const char *zName){ return tirastoreFailpointOn((char*)zName); }
#else
# define tiraTrusting(z) 0
#endif

/* The journal rule: may a journal that this connection did not create be
** rolled back into the database (docs/lock-protocol.md, "Journals")? Only a
** regular file with one link (not a second name of some other file), no
** more writable by others than the database (else someone who cannot write
** the database could alter the rollback), written by a user who could have
** written the database pages themselves: the database's owner, the caller,
** root, or, when the database is writable by everyone (the original's 0666
** files), anyone; when it is writable by its group, a member of that group
** (the journal has the database's group, in a directory that not everyone
** can write, where only members can give a file that group). Pure: the Go
** side calls it too (trust.go), so the rule exists once. */
int tira_journal_verdict(unsigned jMode, unsigned long jNlink, unsigned jUid, unsigned jGid,
                         unsigned dbMode, unsigned dbUid, unsigned dbGid, unsigned dirMode,
                         unsigned euid){
  if( !S_ISREG(jMode) ) return TIRA_JOURNAL_NOT_REGULAR;
  if( jNlink!=1 ) return TIRA_JOURNAL_LINKS;
  if( (jMode & 0022) & ~(dbMode & 0022) ) return TIRA_JOURNAL_MODE;
  if( jUid==dbUid || jUid==euid || jUid==0 ) return TIRA_JOURNAL_TRUSTED;
  if( dbMode & 0002 ) return TIRA_JOURNAL_TRUSTED;
  if( (dbMode & 0020) && jGid==dbGid && !(dirMode & 0002) ) return TIRA_JOURNAL_TRUSTED;
  return TIRA_JOURNAL_OWNER;
}

/* The unix VFS's open system call, replaced (tiraSysOpen) at registration. */
static int (*tiraRealOpen)(const char*, int, int);

/* open(2) for every file SQLite's unix VFS opens (the database, temporary
** files, directories to sync, /dev/urandom): it never blocks, because
** O_NONBLOCK is added (a FIFO planted at a database's name would otherwise
** block a read-only open forever), and a FIFO, socket or block device is
** refused (ENXIO) before SQLite reads a byte; the flag is cleared on what is
** kept, so reads and writes behave as usual. Character devices stay
** allowed: SQLite opens /dev/null and /dev/urandom, and only root can make
** device nodes. */
static int tiraSysOpen(const char *zPath, int flags, int mode){
  int fd;
  struct stat st;
  if( (flags & O_NONBLOCK) || tiraTrusting("shareddir-trust") ){
    return tiraRealOpen(zPath, flags, mode);
  }
  fd = tiraRealOpen(zPath, flags|O_NONBLOCK, mode);
  if( fd<0 ) return fd;
  if( fstat(fd, &st)!=0 ){
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  if( S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || S_ISBLK(st.st_mode) ){
    close(fd);
    errno = ENXIO;
    return -1;
  }
  if( fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)!=0 ){
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

/* CLOCK_MONOTONIC in nanoseconds (a vDSO call on Linux, no system call). */
static sqlite3_int64 tiraMonoNow(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (sqlite3_int64)ts.tv_sec*1000000000 + ts.tv_nsec;
}

/* May the holder of fence f write now? Within the tenure: yes, at the cost of
** a clock read. Past it: only if Go confirms the lock again (fence.go);
** otherwise the fence is lost and stays so until the next tenure, so that a
** rollback of the refused transaction writes nothing either. A connection
** without fence (f==0) is never refused. */
static int tiraFenceOk(TiraFence *f){
  if( f==0 ) return 1;
  if( atomic_load(&f->lost) ) return 0;
  if( tiraMonoNow() < atomic_load(&f->deadline) ) return 1;
  if( tirastoreFenceRenew(f->renew) && !atomic_load(&f->lost)
   && tiraMonoNow() < atomic_load(&f->deadline) ){
    return 1;
  }
  atomic_store(&f->lost, 1);
  return 0;
}

/* The fence of the open database whose journal is zJournal (the pager's own
** pointer, which it passes to xOpen and xDelete alike), or 0. */
static TiraFence *tiraJournalFence(const char *zJournal){
  TiraFence *f = 0;
  TiraDb *p;
  pthread_mutex_lock(&tiraDbListMutex);
  for(p=tiraDbList; p; p=p->pNext){
    if( p->zJournal==zJournal ){ f = p->fence; break; }
  }
  pthread_mutex_unlock(&tiraDbListMutex);
  return f;
}

/* open(2) as SQLite's robust_open does it: close-on-exec, retried on EINTR,
** and never returning descriptors 0-2 (a stray write to stderr must not
** land in a journal); those are parked on /dev/null and the open retried. */
static int tiraRobustOpen(const char *zPath, int flags, mode_t mode){
  for(;;){
    int fd = open(zPath, flags|O_CLOEXEC, mode);
    if( fd<0 ){
      if( errno==EINTR ) continue;
      return -1;
    }
    if( fd>=TIRA_MIN_FD ) return fd;
    if( (flags & (O_CREAT|O_EXCL))==(O_CREAT|O_EXCL) ) unlink(zPath);
    close(fd);
    if( open("/dev/null", O_RDONLY)<0 ) return -1;
  }
}

/* Open the directory that holds zPath (as SQLite's openDirectory does);
** returns -1 on any failure, which callers treat as "no directory sync",
** like SQLite. */
static int tiraOpenDirectory(const char *zPath){
  int fd;
  char *zDir = strdup(zPath);
  char *zSlash;
  if( zDir==0 ) return -1;
  zSlash = strrchr(zDir, '/');
  if( zSlash==zDir ){
    zDir[1] = 0;                 /* "/x" -> "/" */
  }else if( zSlash ){
    *zSlash = 0;                 /* "/a/x" -> "/a" */
  }else{
    strcpy(zDir, ".");           /* "x" -> "." */
  }
  fd = tiraRobustOpen(zDir, O_RDONLY|O_DIRECTORY, 0);
  free(zDir);
  return fd;
}

/* The metadata of the database that a journal open needs, as it is now:
** its mode and owner, and its directory's mode. Two descriptors are opened
** once per connection, on the database and on its directory (where
** SQLite's unixSync opens and closes the directory every time), and
** fstat'ed at each journal open: where SQLite's findCreateFileMode stats
** the database by name. So a chmod or chown of the database is followed
** by the next transaction of every connection: a journal never lets more
** users write it than the database does at that time, and the rule judges
** a journal by the database's mode of the moment. Without a descriptor on
** the database (it cannot be opened for reading), the database is stat'ed
** by name, as SQLite does. */
static int tiraDbLoadInfo(TiraDb *p){
  struct stat st;
  /* "journal-mode-cached": the mode and owner read once per connection,
  ** as before (the negative control of the chmod tests). */
  if( p->haveFds && tiraTrusting("journal-mode-cached") ) return SQLITE_OK;
  if( !p->haveFds ){
    p->dbFd = tiraRobustOpen(p->zPath, O_RDONLY|O_NONBLOCK, 0);
    p->dirFd = tiraOpenDirectory(p->zPath);
    p->haveFds = 1;
  }
  if( p->dbFd>=0 ? fstat(p->dbFd, &st)!=0 : stat(p->zPath, &st)!=0 ) return SQLITE_IOERR_FSTAT;
  p->mode = st.st_mode & 0777;
  p->uid = st.st_uid;
  p->gid = st.st_gid;
  p->dirMode = 0777;   /* unknown: the group case of the journal rule is off */
  if( p->dirFd>=0 && fstat(p->dirFd, &st)==0 ) p->dirMode = st.st_mode & 07777;
  return SQLITE_OK;
}

/* The TiraDb whose pager opens journal zJournal, or 0 when the database was
** not opened through this VFS. sqlite3_database_file_object() is the API
** SQLite provides to VFS shims for exactly this; it is valid for the journal
** names the pager passes to xOpen, which are the only ones that reach it. */
static TiraDb *tiraJournalOwner(const char *zJournal){
  sqlite3_file *f = sqlite3_database_file_object(zJournal);
  return (f && f->pMethods==&tiraDbMethods) ? (TiraDb*)f : 0;
}

/* ------------------------------------------------------ main database file */

/* Close unix-none's file, then the kept directory descriptor. */
static int tiraDbClose(sqlite3_file *pFile){
  TiraDb *p = (TiraDb*)pFile;
  int rc = p->real->pMethods->xClose(p->real);
  pthread_mutex_lock(&tiraDbListMutex);
  if( p->pPrev ) p->pPrev->pNext = p->pNext; else if( tiraDbList==p ) tiraDbList = p->pNext;
  if( p->pNext ) p->pNext->pPrev = p->pPrev;
  p->pNext = p->pPrev = 0;
  pthread_mutex_unlock(&tiraDbListMutex);
  if( p->dirFd>=0 ) close(p->dirFd);
  if( p->dbFd>=0 ) close(p->dbFd);
  p->dirFd = p->dbFd = -1;
  return rc;
}

/* Forward to unix-none. */
static int tiraDbRead(sqlite3_file *pFile, void *pBuf, int iAmt, sqlite3_int64 iOfst){
  sqlite3_file *r = ((TiraDb*)pFile)->real;
  return r->pMethods->xRead(r, pBuf, iAmt, iOfst);
}

#ifdef TIRASTORE_FAILPOINTS
#include <signal.h>
/* failpoint.DBWrite ("db-write=stop" or "db-write=stop@N" in
** TIRASTORE_FAILPOINTS): SIGSTOP this process at its Nth write to a
** database file (the first by default), once (test builds only;
** core/failpoint documents the points). */
static void tiraFailpointDbWrite(void){
  static int done;
  static long writes;
  const char *z = getenv("TIRASTORE_FAILPOINTS");
  const char *at;
  long n = 1;
  if( done || !z || (at = strstr(z, "db-write=stop"))==0 ) return;
  if( at[13]=='@' ) n = strtol(at+14, 0, 10);
  if( __atomic_add_fetch(&writes, 1, __ATOMIC_SEQ_CST)>=n ){
    done = 1;
    raise(SIGSTOP);
  }
}
#else
# define tiraFailpointDbWrite()
#endif

/* Forward to unix-none, if the fence allows. */
static int tiraDbWrite(sqlite3_file *pFile, const void *pBuf, int iAmt, sqlite3_int64 iOfst){
  sqlite3_file *r = ((TiraDb*)pFile)->real;
  tiraFailpointDbWrite();
  TiraFence *f = ((TiraDb*)pFile)->fence;
  if( !tiraFenceOk(f) ) return SQLITE_IOERR_LOCK;
  if( f ) atomic_fetch_add(&f->writes, 1);
  return r->pMethods->xWrite(r, pBuf, iAmt, iOfst);
}

/* Forward to unix-none, if the fence allows. */
static int tiraDbTruncate(sqlite3_file *pFile, sqlite3_int64 size){
  sqlite3_file *r = ((TiraDb*)pFile)->real;
  TiraFence *f = ((TiraDb*)pFile)->fence;
  if( !tiraFenceOk(f) ) return SQLITE_IOERR_LOCK;
  if( f ) atomic_fetch_add(&f->writes, 1);
  return r->pMethods->xTruncate(r, size);
}

/* Forward to unix-none, if the fence allows. */
static int tiraDbSync(sqlite3_file *pFile, int flags){
  sqlite3_file *r = ((TiraDb*)pFile)->real;
  if( !tiraFenceOk(((TiraDb*)pFile)->fence) ) return SQLITE_IOERR_LOCK;
  return r->pMethods->xSync(r, flags);
}

/* Forward to unix-none. */
static int tiraDbFileSize(sqlite3_file *pFile, sqlite3_int64 *pSize){
  sqlite3_file *r = ((TiraDb*)pFile)->real;
  return r->pMethods->xFileSize(r, pSize);
}

/* Forward to unix-none (a no-op there). */
static int tiraDbLock(sqlite3_file *pFile, int eLock){
  sqlite3_file *r = ((TiraDb*)pFile)->real;
  return r->pMethods->xLock(r, eLock);
}

/* Forward to unix-none (a no-op there). */
static int tiraDbUnlock(sqlite3_file *pFile, int eLock){
  sqlite3_file *r = ((TiraDb*)pFile)->real;
  return r->pMethods->xUnlock(r, eLock);
}

/* Forward to unix-none (always "not reserved" there). */
static int tiraDbCheckReservedLock(sqlite3_file *pFile, int *pResOut){
  sqlite3_file *r = ((TiraDb*)pFile)->real;
  return r->pMethods->xCheckReservedLock(r, pResOut);
}

/* Forward to unix-none. */
static int tiraDbFileControl(sqlite3_file *pFile, int op, void *pArg){
  sqlite3_file *r = ((TiraDb*)pFile)->real;
  return r->pMethods->xFileControl(r, op, pArg);
}

/* Forward to unix-none. */
static int tiraDbSectorSize(sqlite3_file *pFile){
  sqlite3_file *r = ((TiraDb*)pFile)->real;
  return r->pMethods->xSectorSize(r);
}

/* Forward to unix-none. */
static int tiraDbDeviceCharacteristics(sqlite3_file *pFile){
  sqlite3_file *r = ((TiraDb*)pFile)->real;
  return r->pMethods->xDeviceCharacteristics(r);
}

/* Version 1: no shared memory, so SQLite can never run this file in WAL
** mode (sqlite3PagerWalSupported needs xShmMap; unix-none has none either),
** and no memory mapping (mmap_size is 0 by default, so none is lost). */
static const sqlite3_io_methods tiraDbMethods = {
  1,
  tiraDbClose,
  tiraDbRead,
  tiraDbWrite,
  tiraDbTruncate,
  tiraDbSync,
  tiraDbFileSize,
  tiraDbLock,
  tiraDbUnlock,
  tiraDbCheckReservedLock,
  tiraDbFileControl,
  tiraDbSectorSize,
  tiraDbDeviceCharacteristics,
  0, 0, 0, 0, 0, 0
};

/* Open a main database through unix-none and wrap it, with the fence named
** by the URI parameter tirafence (fence.go), and list it for xDelete.
** Nothing else happens here: the metadata new journals need is loaded at
** the first journal. */
static int tiraDbOpen(const char *zName, sqlite3_file *pFile, int flags, int *pOutFlags){
  TiraDb *p = (TiraDb*)pFile;
  const char *zFence;
  int rc;
  memset(p, 0, sizeof(*p));
  p->real = (sqlite3_file*)((char*)p + TIRA_ROUND8(sizeof(TiraDb)));
  p->zPath = zName;
  p->dirFd = p->dbFd = -1;
  p->real->pMethods = 0;
  rc = origVfs->xOpen(origVfs, zName, p->real, flags, pOutFlags);
  if( rc!=SQLITE_OK ){
    if( p->real->pMethods ) p->real->pMethods->xClose(p->real);
    return rc;
  }
  if( zName ){
    zFence = sqlite3_uri_parameter(zName, "tirafence");
    if( zFence ) p->fence = (TiraFence*)(uintptr_t)strtoull(zFence, 0, 10);
    p->zJournal = sqlite3_filename_journal(zName);
  }
  pthread_mutex_lock(&tiraDbListMutex);
  p->pNext = tiraDbList;
  if( tiraDbList ) tiraDbList->pPrev = p;
  tiraDbList = p;
  pthread_mutex_unlock(&tiraDbListMutex);
  p->base.pMethods = &tiraDbMethods;
  return SQLITE_OK;
}

/* -------------------------------------------------------- rollback journal */

/* Close the journal. */
static int tiraJrnlClose(sqlite3_file *pFile){
  TiraJrnl *p = (TiraJrnl*)pFile;
  close(p->fd);   /* never retried: on Linux the descriptor is gone anyway */
  p->fd = -1;
  return SQLITE_OK;
}

/* pread until iAmt bytes or end of file; a short read zero-fills the rest
** and says so, as SQLite requires. Errors map as in unixRead. */
static int tiraJrnlRead(sqlite3_file *pFile, void *pBuf, int iAmt, sqlite3_int64 iOfst){
  TiraJrnl *p = (TiraJrnl*)pFile;
  char *z = (char*)pBuf;
  int got = 0;
  while( got<iAmt ){
    ssize_t n = pread(p->fd, z + got, (size_t)(iAmt - got), (off_t)(iOfst + got));
    if( n<0 ){
      if( errno==EINTR ) continue;
      if( errno==EIO || errno==ERANGE || errno==ENXIO ) return SQLITE_IOERR_CORRUPTFS;
      return SQLITE_IOERR_READ;
    }
    if( n==0 ) break;
    got += (int)n;
  }
  if( got<iAmt ){
    memset(z + got, 0, (size_t)(iAmt - got));
    return SQLITE_IOERR_SHORT_READ;
  }
  return SQLITE_OK;
}

/* pwrite all iAmt bytes, looping on partial writes and EINTR. A full disk
** (ENOSPC, or a write that makes no progress) is SQLITE_FULL, as in unixWrite. */
static int tiraJrnlWrite(sqlite3_file *pFile, const void *pBuf, int iAmt, sqlite3_int64 iOfst){
  TiraJrnl *p = (TiraJrnl*)pFile;
  const char *z = (const char*)pBuf;
  if( !tiraFenceOk(p->fence) ) return SQLITE_IOERR_LOCK;
  while( iAmt>0 ){
    ssize_t n = pwrite(p->fd, z, (size_t)iAmt, (off_t)iOfst);
    if( n<0 ){
      if( errno==EINTR ) continue;
      return errno==ENOSPC ? SQLITE_FULL : SQLITE_IOERR_WRITE;
    }
    if( n==0 ) return SQLITE_FULL;
    z += n;
    iAmt -= (int)n;
    iOfst += n;
  }
  return SQLITE_OK;
}

/* ftruncate, retried on EINTR. */
static int tiraJrnlTruncate(sqlite3_file *pFile, sqlite3_int64 size){
  TiraJrnl *p = (TiraJrnl*)pFile;
  int rc;
  if( !tiraFenceOk(p->fence) ) return SQLITE_IOERR_LOCK;
  do{ rc = ftruncate(p->fd, (off_t)size); }while( rc<0 && errno==EINTR );
  return rc ? SQLITE_IOERR_TRUNCATE : SQLITE_OK;
}

/* fsync the journal (fdatasync when SQLite says the inode need not be
** flushed: the size still is, the rest SQLite does not care about). The
** first sync after creating the journal also fsyncs its directory, so that
** the new name survives a power loss: the same one-time directory sync as
** unixSync, through the connection's kept descriptor. As in unixSync, a
** directory that cannot be opened or synced is not an error. */
static int tiraJrnlSync(sqlite3_file *pFile, int flags){
  TiraJrnl *p = (TiraJrnl*)pFile;
  int rc;
  if( !tiraFenceOk(p->fence) ) return SQLITE_IOERR_LOCK;
#if defined(__linux__)
  rc = (flags & SQLITE_SYNC_DATAONLY) ? fdatasync(p->fd) : fsync(p->fd);
#else
  (void)flags;
  rc = fsync(p->fd);
#endif
  if( rc ) return SQLITE_IOERR_FSYNC;
  if( p->dirSync ){
    if( p->dirFd>=0 ){
      (void)fsync(p->dirFd);
    }else{
      int fd = tiraOpenDirectory(p->zPath);   /* fallback: SQLite's way */
      if( fd>=0 ){
        (void)fsync(fd);
        close(fd);
      }
    }
    p->dirSync = 0;
  }
  return SQLITE_OK;
}

/* The size from fstat (descriptor-based, no path lookup). */
static int tiraJrnlFileSize(sqlite3_file *pFile, sqlite3_int64 *pSize){
  TiraJrnl *p = (TiraJrnl*)pFile;
  struct stat st;
  if( fstat(p->fd, &st)!=0 ) return SQLITE_IOERR_FSTAT;
  *pSize = (sqlite3_int64)st.st_size;
  return SQLITE_OK;
}

/* Journals are never locked (unix-none does not lock them either). */
static int tiraJrnlLock(sqlite3_file *pFile, int eLock){
  (void)pFile; (void)eLock;
  return SQLITE_OK;
}

/* Journals are never locked. */
static int tiraJrnlUnlock(sqlite3_file *pFile, int eLock){
  (void)pFile; (void)eLock;
  return SQLITE_OK;
}

/* Journals are never locked: nobody holds a reserved lock. */
static int tiraJrnlCheckReservedLock(sqlite3_file *pFile, int *pResOut){
  (void)pFile;
  *pResOut = 0;
  return SQLITE_OK;
}

/* No file controls: SQLite treats SQLITE_NOTFOUND as "not supported". */
static int tiraJrnlFileControl(sqlite3_file *pFile, int op, void *pArg){
  (void)pFile; (void)op; (void)pArg;
  return SQLITE_NOTFOUND;
}

/* The unix VFS's default sector size. (The pager sizes journal headers from
** the database file's sector size, not this one.) */
static int tiraJrnlSectorSize(sqlite3_file *pFile){
  (void)pFile;
  return TIRA_SECTOR_SIZE;
}

/* What unixDeviceCharacteristics gives a journal on Linux: powersafe
** overwrite (SQLITE_POWERSAFE_OVERWRITE defaults to 1) and sub-page reads.
** Nothing stronger (no atomic, safe-append, sequential or undeletable-when-
** open property). The pager reads these flags from the database file only. */
static int tiraJrnlDeviceCharacteristics(sqlite3_file *pFile){
  (void)pFile;
  return SQLITE_IOCAP_POWERSAFE_OVERWRITE | SQLITE_IOCAP_SUBPAGE_READ;
}

static const sqlite3_io_methods tiraJrnlMethods = {
  1,
  tiraJrnlClose,
  tiraJrnlRead,
  tiraJrnlWrite,
  tiraJrnlTruncate,
  tiraJrnlSync,
  tiraJrnlFileSize,
  tiraJrnlLock,
  tiraJrnlUnlock,
  tiraJrnlCheckReservedLock,
  tiraJrnlFileControl,
  tiraJrnlSectorSize,
  tiraJrnlDeviceCharacteristics,
  0, 0, 0, 0, 0, 0
};

/* Open (or create) the rollback journal of database db, like unixOpen does
** for SQLITE_OPEN_MAIN_JOURNAL: O_NOFOLLOW, a read-only retry when
** read-write fails, SQLITE_READONLY_DIRECTORY when the directory forbids
** creating it. Two differences, for a directory shared with other users
** (trust.go):
**
**   - a journal is created with O_CREAT|O_EXCL, so that this call knows
**     whether it made the file; only then does it get the database's mode
**     whatever the umask (fchmod, only when it differs) and, as root, its
**     owner (fchown, only when it differs), exactly SQLite's policy, from
**     an fstat of a descriptor kept per connection instead of a stat of the
**     database by name;
**   - every open adds O_NONBLOCK (a FIFO at the name would block it) and
**     checks the descriptor: a journal this call did not create (a crashed
**     writer's hot journal, or something planted at the name) is used only
**     if tira_journal_verdict trusts it, else the open fails with
**     TIRA_REFUSED and nothing of it is read. */
static int tiraJrnlOpen(TiraDb *db, const char *zName, sqlite3_file *pFile, int flags, int *pOutFlags){
  TiraJrnl *p = (TiraJrnl*)pFile;
  int isCreate = (flags & SQLITE_OPEN_CREATE)!=0;
  int checked = !tiraTrusting("shareddir-trust");
  int oflags = O_LARGEFILE|O_NOFOLLOW|(checked ? O_NONBLOCK : 0);
  int acc = (flags & SQLITE_OPEN_READWRITE) ? O_RDWR : O_RDONLY;
  int created = 0;
  mode_t mode = TIRA_DEFAULT_PERM;
  struct stat st;
  int fd, rc;

  memset(p, 0, sizeof(*p));
  p->fd = -1;
  p->dirFd = -1;
  /* Opening the journal starts a write or a hot journal's rollback, and a
  ** create could open another holder's journal: fenced like a write. */
  if( !tiraFenceOk(db->fence) ) return SQLITE_IOERR_LOCK;
  p->fence = db->fence;
  rc = tiraDbLoadInfo(db);   /* the database's mode now: the rule needs it too */
  if( rc!=SQLITE_OK ) return rc;
  if( db->mode ) mode = db->mode;

  fd = -1;
  if( isCreate ){
    fd = tiraRobustOpen(zName, oflags|acc|O_CREAT|O_EXCL, mode);
    if( fd>=0 ){
      created = 1;
    }else if( errno!=EEXIST || (flags & SQLITE_OPEN_EXCLUSIVE) ){
      int err = errno;
      if( err==EACCES && access(zName, F_OK)!=0 ) return SQLITE_READONLY_DIRECTORY;
      if( err!=EEXIST && err!=EISDIR ){
        isCreate = 0;   /* as unixOpen: try read-only below */
        flags &= ~(SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE);
        flags |= SQLITE_OPEN_READONLY;
        acc = O_RDONLY;
      }else if( err==EEXIST ){
        return SQLITE_CANTOPEN;
      }
    }
  }
  if( fd<0 ){
    fd = tiraRobustOpen(zName, oflags|acc, 0);
    if( fd<0 && errno!=EISDIR && errno!=ELOOP && acc==O_RDWR ){
      flags &= ~(SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE);
      flags |= SQLITE_OPEN_READONLY;
      fd = tiraRobustOpen(zName, oflags|O_RDONLY, 0);
    }
    if( fd<0 ){
      /* A link (or, trusting, anything) at the name: refused, explained
      ** by the Go side. */
      return (errno==ELOOP && checked) ? TIRA_REFUSED : SQLITE_CANTOPEN;
    }
  }

  if( checked || created ){
    if( fstat(fd, &st)!=0 ){
      close(fd);
      return SQLITE_IOERR_FSTAT;
    }
  }
  if( checked && !created ){
    int verdict = tira_journal_verdict(st.st_mode, (unsigned long)st.st_nlink, st.st_uid, st.st_gid,
                                       db->mode, db->uid, db->gid, db->dirMode, geteuid());
    if( verdict==TIRA_JOURNAL_NOT_REGULAR
     || (verdict!=TIRA_JOURNAL_TRUSTED && !tiraTrusting("journal-trust")) ){
      close(fd);
      return TIRA_REFUSED;
    }
  }
  if( checked && fcntl(fd, F_SETFL, 0)!=0 ){   /* clear O_NONBLOCK */
    close(fd);
    return SQLITE_CANTOPEN;
  }
  if( created && db->mode ){
    if( (st.st_mode & 0777)!=db->mode ){
      (void)fchmod(fd, db->mode);
    }
    if( (st.st_uid!=db->uid || st.st_gid!=db->gid) && geteuid()==0 ){
      (void)fchown(fd, db->uid, db->gid);
    }
  }

  p->fd = fd;
  p->zPath = zName;
  if( created ){
    p->dirFd = db->dirFd;
    p->dirSync = 1;
  }
  if( pOutFlags ) *pOutFlags = flags;
  p->base.pMethods = &tiraJrnlMethods;
  return SQLITE_OK;
}

/* --------------------------------------------------------------- the VFS */

/* Main databases are wrapped, rollback journals are ours, everything else
** (temp files, sub-journals, super-journals, a journal of a database this
** VFS did not open) is unix-none's, unchanged. */
static int tiraOpen(sqlite3_vfs *pVfs, const char *zName, sqlite3_file *pFile, int flags, int *pOutFlags){
  (void)pVfs;
  if( flags & SQLITE_OPEN_MAIN_DB ){
    return tiraDbOpen(zName, pFile, flags, pOutFlags);
  }
  if( (flags & SQLITE_OPEN_MAIN_JOURNAL) && zName ){
    TiraDb *db = tiraJournalOwner(zName);
    if( db ) return tiraJrnlOpen(db, zName, pFile, flags, pOutFlags);
  }
  return origVfs->xOpen(origVfs, zName, pFile, flags, pOutFlags);
}

/* "Does <db>-wal exist?" is answered "no" without a stat: a database opened
** here can never be in WAL mode (see tiraDbMethods and vfs.go). Every other
** question goes to unix-none. */
static int tiraAccess(sqlite3_vfs *pVfs, const char *zPath, int flags, int *pResOut){
  size_t n = strlen(zPath);
  (void)pVfs;
  if( flags==SQLITE_ACCESS_EXISTS && n>=4 && memcmp(zPath + n - 4, "-wal", 4)==0 ){
    *pResOut = 0;
    return SQLITE_OK;
  }
  return origVfs->xAccess(origVfs, zPath, flags, pResOut);
}

/* Deleting a journal is the commit of a transaction (journal_mode=DELETE),
** or the end of a rollback: refused, like a write, once the fence of its
** database is lost; another holder's journal may have the same name by then.
** Everything else goes to unix-none. */
static int tiraDelete(sqlite3_vfs *pVfs, const char *zPath, int dirSync){
  (void)pVfs;
  if( !tiraFenceOk(tiraJournalFence(zPath)) ) return SQLITE_IOERR_DELETE;
  return origVfs->xDelete(origVfs, zPath, dirSync);
}

/* Register the VFS (not as the default) once; called from Go under a
** sync.Once. Returns an SQLite result code. The VFS is a copy of unix-none
** with xOpen, xAccess, xDelete, szOsFile and zName replaced: the unix VFS's methods
** are shared by all its variants and find their locking style through
** pAppData, which the copy keeps, so the ones left in place behave exactly
** as in unix-none. */
int tirastore_vfs_register(void){
  int sz;
  if( origVfs ) return SQLITE_OK;
  origVfs = sqlite3_vfs_find("unix-none");
  if( origVfs==0 ) return SQLITE_ERROR;
  tiraVfs = *origVfs;
  tiraVfs.pNext = 0;
  tiraVfs.zName = "tirastore";
  sz = TIRA_ROUND8((int)sizeof(TiraDb)) + origVfs->szOsFile;
  if( sz<(int)sizeof(TiraJrnl) ) sz = (int)sizeof(TiraJrnl);
  tiraVfs.szOsFile = sz;
  tiraVfs.xOpen = tiraOpen;
  tiraVfs.xAccess = tiraAccess;
  tiraVfs.xDelete = tiraDelete;
  /* Every open of the unix VFS (ours and unix-none's, which share the
  ** system-call table) goes through tiraSysOpen. */
  if( origVfs->iVersion>=3 && origVfs->xGetSystemCall && origVfs->xSetSystemCall ){
    tiraRealOpen = (int(*)(const char*, int, int))origVfs->xGetSystemCall(origVfs, "open");
    if( tiraRealOpen==0
     || origVfs->xSetSystemCall(origVfs, "open", (sqlite3_syscall_ptr)tiraSysOpen)!=SQLITE_OK ){
      return SQLITE_ERROR;
    }
  }else{
    return SQLITE_ERROR;
  }
  return sqlite3_vfs_register(&tiraVfs, 0);
}

/* ------------------------------------------------------------- fences */

/* A new fence whose renewals call the Go handle h; no tenure yet (every
** write asks for a renewal). Returns 0 when out of memory. */
void *tira_fence_new(uintptr_t h){
  TiraFence *f = calloc(1, sizeof(TiraFence));
  if( f ) f->renew = h;
  return f;
}

/* Frees a fence no open connection uses any more. */
void tira_fence_free(void *f){ free(f); }

/* A new tenure: writes need no renewal before deadline (CLOCK_MONOTONIC
** ns); clears a lost fence. deadline 0 ends the tenure (the lock is not
** held): the next write asks for a renewal, which then fails. */
void tira_fence_set(void *pf, sqlite3_int64 deadline){
  TiraFence *f = (TiraFence*)pf;
  atomic_store(&f->deadline, deadline);
  atomic_store(&f->lost, 0);
}

/* The lock is known lost: refuse everything until the next tenure. */
void tira_fence_lose(void *pf){ atomic_store(&((TiraFence*)pf)->lost, 1); }

/* Whether the fence refused (or would refuse) a write since its tenure. */
int tira_fence_lost(void *pf){ return atomic_load(&((TiraFence*)pf)->lost); }

/* How many writes and truncates of the database file the fence let pass. */
unsigned long long tira_fence_writes(void *pf){ return atomic_load(&((TiraFence*)pf)->writes); }
