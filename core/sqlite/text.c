/*
** text.c: the SQL function tirastore_text(token), which returns a text the
** engine registered (tira_text_put) as SQLite's result without a copy
** (SQLITE_STATIC), so that writing a program of hundreds of megabytes costs
** SQLite one copy of its source (the row it builds) instead of two (a bound
** parameter is copied first, go-sqlite3 binding with SQLITE_TRANSIENT).
** See text.go.
**
** A token names a registered text only between tira_text_put and
** tira_text_drop, around the one statement that uses it; the function is
** SQLITE_DIRECTONLY, so that no trigger, view or other schema object of a
** database file can call it: only the engine's own statements do.
*/
#include <pthread.h>
#include <stddef.h>

/* The public declarations of SQLite's C interface used here, as in
** vfs_sqlite3.h (copied from sqlite3.h of the amalgamation go-sqlite3
** bundles; public domain). */
typedef long long int sqlite3_int64;
typedef unsigned long long int sqlite3_uint64;
typedef struct sqlite3 sqlite3;
typedef struct sqlite3_context sqlite3_context;
typedef struct sqlite3_value sqlite3_value;
typedef struct sqlite3_api_routines sqlite3_api_routines;
#define SQLITE_UTF8        1
#define SQLITE_DIRECTONLY  0x000080000
#define SQLITE_STATIC      ((void (*)(void *))0)
int sqlite3_auto_extension(void (*xEntryPoint)(void));
int sqlite3_create_function_v2(sqlite3 *db, const char *zFunctionName, int nArg, int eTextRep, void *pApp,
                               void (*xFunc)(sqlite3_context *, int, sqlite3_value **),
                               void (*xStep)(sqlite3_context *, int, sqlite3_value **),
                               void (*xFinal)(sqlite3_context *), void (*xDestroy)(void *));
sqlite3_int64 sqlite3_value_int64(sqlite3_value *);
void sqlite3_result_text64(sqlite3_context *, const char *z, sqlite3_uint64 n, void (*)(void *),
                           unsigned char encoding);
void sqlite3_result_error(sqlite3_context *, const char *, int);

/* One slot per text being written; a process writes a few at a time (one
** per store in use), so a small table scanned under a mutex is enough. */
#define TIRA_TEXT_SLOTS 64
static struct {
  sqlite3_int64 token; /* 0: free */
  const char *p;
  sqlite3_int64 n;
} tira_texts[TIRA_TEXT_SLOTS];
static sqlite3_int64 tira_text_next = 1;
static pthread_mutex_t tira_text_mu = PTHREAD_MUTEX_INITIALIZER;

/* tira_text_put registers the n bytes at p and returns their token, or 0
** when every slot is taken (the caller then binds the text as usual). */
sqlite3_int64 tira_text_put(const char *p, sqlite3_int64 n) {
  sqlite3_int64 token = 0;
  pthread_mutex_lock(&tira_text_mu);
  for (int i = 0; i < TIRA_TEXT_SLOTS; i++) {
    if (tira_texts[i].token == 0) {
      token = tira_text_next++;
      tira_texts[i].token = token;
      tira_texts[i].p = p;
      tira_texts[i].n = n;
      break;
    }
  }
  pthread_mutex_unlock(&tira_text_mu);
  return token;
}

/* tira_text_drop forgets a token. */
void tira_text_drop(sqlite3_int64 token) {
  pthread_mutex_lock(&tira_text_mu);
  for (int i = 0; i < TIRA_TEXT_SLOTS; i++) {
    if (tira_texts[i].token == token) {
      tira_texts[i].token = 0;
      tira_texts[i].p = NULL;
      break;
    }
  }
  pthread_mutex_unlock(&tira_text_mu);
}

static void tira_text_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  sqlite3_int64 token = sqlite3_value_int64(argv[0]);
  const char *p = NULL;
  sqlite3_int64 n = 0;
  (void)argc;
  pthread_mutex_lock(&tira_text_mu);
  for (int i = 0; token != 0 && i < TIRA_TEXT_SLOTS; i++) {
    if (tira_texts[i].token == token) {
      p = tira_texts[i].p;
      n = tira_texts[i].n;
      break;
    }
  }
  pthread_mutex_unlock(&tira_text_mu);
  if (p == NULL) {
    sqlite3_result_error(ctx, "tirastore_text: no such text", -1);
    return;
  }
  sqlite3_result_text64(ctx, p, (sqlite3_uint64)n, SQLITE_STATIC, SQLITE_UTF8);
}

static int tira_text_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi) {
  (void)pzErrMsg;
  (void)pApi;
  return sqlite3_create_function_v2(db, "tirastore_text", 1, SQLITE_UTF8 | SQLITE_DIRECTONLY, NULL, tira_text_fn,
                                    NULL, NULL, NULL);
}

/* tira_text_register makes every connection opened from now on know the
** function (an automatic extension). */
int tira_text_register(void) { return sqlite3_auto_extension((void (*)(void))tira_text_init); }
