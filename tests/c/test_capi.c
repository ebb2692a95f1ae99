/*
 * test_capi.c — exercises the C ABI of include/tirastore.h from plain C11.
 *
 * Built and run by `make test-c`:
 *   gcc -std=c11 -Wall -Wextra -Werror -Iinclude tests/c/test_capi.c \
 *       -Lbuild -ltirastore -Wl,-rpath,$PWD/build -o build/test_capi
 *
 * Every check prints one line ("ok" or "FAIL" and what was checked); the
 * program ends with "N passed, M failed" and exits nonzero if any check
 * failed. Replies are compared after removing the whitespace outside JSON
 * strings, so the checks do not depend on the library's spacing. The
 * expected program hash below was computed independently, with Python's
 * hashlib, from the normalized source "voidblur(){intx=1;}".
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */

#include "tirastore.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int passed, failed;

static void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (ok) {
        passed++;
    } else {
        failed++;
    }
}

/* squeeze copies a JSON document without the whitespace outside strings. */
static char *squeeze(const char *doc) {
    if (doc == NULL) {
        return NULL;
    }
    char *out = malloc(strlen(doc) + 1);
    if (out == NULL) {
        perror("malloc");
        exit(2);
    }
    size_t n = 0;
    int in_string = 0;
    for (const char *p = doc; *p; p++) {
        if (in_string) {
            out[n++] = *p;
            if (*p == '\\' && p[1]) {
                out[n++] = *++p;
            } else if (*p == '"') {
                in_string = 0;
            }
        } else if (*p == '"') {
            in_string = 1;
            out[n++] = *p;
        } else if (*p != ' ' && *p != '\n' && *p != '\t' && *p != '\r') {
            out[n++] = *p;
        }
    }
    out[n] = '\0';
    return out;
}

/* A call's outcome: the status and the squeezed reply (NULL if none). */
typedef struct {
    int status;
    char *reply;
} reply_t;

/* take converts a library buffer into a reply_t and frees the buffer. */
static reply_t take(int status, char *buf) {
    reply_t r = {status, squeeze(buf)};
    tirastore_free(buf);
    return r;
}

static reply_t call(uint64_t handle, const char *method, const char *args) {
    char *out = NULL;
    int status = tirastore_call(handle, method, args, &out);
    return take(status, out);
}

static reply_t open_store(const char *db_path, const char *options, uint64_t *handle) {
    char *out = NULL;
    int status = tirastore_open(db_path, options, handle, &out);
    return take(status, out);
}

static reply_t close_store(uint64_t handle) {
    char *out = NULL;
    int status = tirastore_close(handle, &out);
    return take(status, out);
}

static int contains(const reply_t *r, const char *needle) {
    return r->reply != NULL && strstr(r->reply, needle) != NULL;
}

static int equals(const reply_t *r, const char *want) {
    return r->reply != NULL && strcmp(r->reply, want) == 0;
}

/* has_message: an error document with a non-empty message. */
static int has_message(const reply_t *r) {
    const char *m = r->reply ? strstr(r->reply, "\"message\":\"") : NULL;
    return m != NULL && m[strlen("\"message\":\"")] != '"';
}

static const char *show(const reply_t *r) { return r->reply ? r->reply : "(no reply)"; }

/* expect_reply checks status OK and an exact (squeezed) reply. */
static void expect_reply(const char *what, reply_t r, const char *want) {
    check(r.status == TIRASTORE_OK && equals(&r, want), "%s -> %s (want %s)", what, show(&r), want);
    free(r.reply);
}

/* expect_ok_with checks status OK and that the reply contains needle. */
static void expect_ok_with(const char *what, reply_t r, const char *needle) {
    check(r.status == TIRASTORE_OK && contains(&r, needle), "%s -> status %d, reply contains %s: %s", what,
          r.status, needle, show(&r));
    free(r.reply);
}

/* expect_error checks the status, the error type and a non-empty message. */
static void expect_error(const char *what, reply_t r, int want_status, const char *want_type) {
    char type[80], code[32];
    snprintf(type, sizeof type, "\"type\":\"%s\"", want_type);
    snprintf(code, sizeof code, "\"code\":%d", want_status);
    check(r.status == want_status && contains(&r, "{\"error\":") && contains(&r, type) && contains(&r, code) &&
              has_message(&r),
          "%s -> status %d (want %d, %s): %s", what, r.status, want_status, want_type, show(&r));
    free(r.reply);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static const char *SRC_ARGS = "\"program_name\":\"blur\","
                              "\"program_source_code\":\"void blur() {\\n  /* body */\\n  int x = 1; // one\\n}\\n\"";

int main(void) {
    char args[2048];

    /* --- version -------------------------------------------------------- */
    const char *version = tirastore_version();
    check(version != NULL && version[0] != '\0', "tirastore_version() is non-empty: \"%s\"", version ? version : "");
    snprintf(args, sizeof args, "{\"result\":\"%s\"}", version ? version : "");
    expect_reply("call(0, version, NULL)", call(0, "version", NULL), args);
    check(tirastore_version() == version, "tirastore_version() returns the same static string");

    /* --- utilities on handle 0 ---------------------------------------- */
    expect_reply("normalize_schedule(spaces, double quotes)",
                 call(0, "normalize_schedule", "{\"schedule\":\"S( L0 , L1 ,4,8,comps=[\\\"c1\\\"])\"}"),
                 "{\"result\":\"S(L0,L1,4,8,comps=['c1'])\"}");
    expect_reply("normalize_schedule(\"\")", call(0, "normalize_schedule", "{\"schedule\":\"\"}"), "{\"result\":\"\"}");
    expect_reply("validate_schedule(valid chain)",
                 call(0, "validate_schedule", "{\"schedule\":\"T2(L0,L1,32,32,comps=['c1'])|U(L2,4,comps=['c1'])\"}"),
                 "{\"result\":[true,\"\"]}");
    expect_reply("validate_schedule(\"\") is valid", call(0, "validate_schedule", "{\"schedule\":\"\"}"),
                 "{\"result\":[true,\"\"]}");
    expect_reply("validate_schedule(unknown transformation)",
                 call(0, "validate_schedule", "{\"schedule\":\"X(L0,comps=['c1'])\"}"),
                 "{\"result\":[false,\"Unknown transformation: 'X' in \\\"X(L0,comps=['c1'])\\\"\"]}");
    expect_ok_with("validate_schedule(malformed S)", call(0, "validate_schedule", "{\"schedule\":\"S(L0,4,comps=['c1'])\"}"),
                   "{\"result\":[false,\"Malformed S transformation:");
    expect_ok_with("validate_schedule(double '|')",
                   call(0, "validate_schedule", "{\"schedule\":\"R(L0,comps=['c1'])||R(L1,comps=['c1'])\"}"),
                   "{\"result\":[false,\"Empty segment in schedule");
    snprintf(args, sizeof args, "{\"source\":\"void blur() {\\n  /* body */\\n  int x = 1; // one\\n}\\n\"}");
    expect_reply("normalize_program(blur)", call(0, "normalize_program", args), "{\"result\":\"voidblur(){intx=1;}\"}");
    expect_reply("make_program_hash(blur) matches hashlib",
                 call(0, "make_program_hash", args),
                 "{\"result\":\"1cac9ddab509f2765ed4e76030f73a7baddcb9d8b1e1fa4cdb6c018d60d93d22\"}");
    expect_reply("make_program_hash(#include + reformatted blur) is the same",
                 call(0, "make_program_hash",
                      "{\"source\":\"#include <tiramisu/tiramisu.h>\\nvoid  blur ( ) { int x=1; }\"}"),
                 "{\"result\":\"1cac9ddab509f2765ed4e76030f73a7baddcb9d8b1e1fa4cdb6c018d60d93d22\"}");
    expect_reply("make_program_hash(\"\") is sha256 of nothing", call(0, "make_program_hash", "{\"source\":\"\"}"),
                 "{\"result\":\"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\"}");

    /* --- a store in a temporary directory ------------------------------- */
    /* in $TMPDIR (the test run's own, tests/isolate), else /tmp */
    const char *tmp = getenv("TMPDIR");
    char dir[200];
    snprintf(dir, sizeof dir, "%s/tirastore-capi-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    char db[512], export_path[512];
    snprintf(db, sizeof db, "%s/cache.db", dir);
    snprintf(export_path, sizeof export_path, "%s/export.json", dir);

    uint64_t h = 0;
    reply_t r = open_store(db, "{\"source_project\":\"c-test\",\"cpu_model\":\"Test CPU\",\"slurm_cpus\":\"4\"}", &h);
    check(r.status == TIRASTORE_OK && h != 0 && contains(&r, "\"writes_allowed\":true") &&
              contains(&r, "\"source_project\":\"c-test\"") && contains(&r, "cache.db.lock"),
          "tirastore_open(%s) -> status %d, handle %llu: %s", db, r.status, (unsigned long long)h, show(&r));
    free(r.reply);
    if (h == 0) { /* nothing below can run */
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        printf("%d passed, %d failed\n", passed, failed);
        return 1;
    }

    const char *sched = "\"tiralib_schedule_string\":\"S(L0,L1,4,8,comps=['c1'])\"";
    char lookup_args[1024];
    snprintf(lookup_args, sizeof lookup_args, "{%s,%s}", SRC_ARGS, sched);

    expect_reply("lookup on an empty store misses", call(h, "lookup", lookup_args), "{\"result\":null}");
    expect_reply("contains on an empty store", call(h, "contains", lookup_args), "{\"result\":false}");
    expect_reply("count with NULL args (= {})", call(h, "count", NULL), "{\"result\":0}");

    snprintf(args, sizeof args, "{%s,%s,\"is_legal\":true,\"execution_times\":[0.042,0.039,0.041]}", SRC_ARGS, sched);
    expect_reply("record writes", call(h, "record", args), "{\"result\":true}");
    expect_reply("record again returns false", call(h, "record", args), "{\"result\":false}");

    r = call(h, "lookup", lookup_args);
    check(r.status == TIRASTORE_OK && contains(&r, "\"is_legal\":true") &&
              contains(&r, "\"execution_times\":[0.042,0.039,0.041]") &&
              contains(&r, "\"schedule\":\"S(L0,L1,4,8,comps=['c1'])\"") &&
              contains(&r, "\"source_project\":\"c-test\"") && contains(&r, "\"hostname\":\"") &&
              contains(&r, "\"creation_date\":\""),
          "lookup hits: %s", show(&r));
    free(r.reply);
    snprintf(args, sizeof args, "{%s,\"tiralib_schedule_string\":\"S( L0, L1, 4, 8, comps=[\\\"c1\\\"] )\"}", SRC_ARGS);
    expect_ok_with("lookup of a cosmetically different schedule hits", call(h, "lookup", args),
                   "\"execution_times\":[0.042,0.039,0.041]");
    snprintf(args, sizeof args, "{%s,\"tiralib_schedule_string\":\"R(L0,comps=['c1'])\"}", SRC_ARGS);
    expect_reply("lookup of another schedule misses", call(h, "lookup", args), "{\"result\":null}");
    expect_reply("contains after record", call(h, "contains", lookup_args), "{\"result\":true}");

    /* The reads and writes by program_hash (what make_program_hash returns) instead of the source. */
    {
        const char *hash = "\"program_name\":\"blur\","
                           "\"program_hash\":\"1cac9ddab509f2765ed4e76030f73a7baddcb9d8b1e1fa4cdb6c018d60d93d22\"";
        const char *other = "\"program_name\":\"blur\","
                            "\"program_hash\":\"0000000000000000000000000000000000000000000000000000000000000000\"";
        r = call(h, "lookup", lookup_args);
        snprintf(args, sizeof args, "{%s,\"tiralib_schedule_string\":\"S( L0, L1, 4, 8, comps=[\\\"c1\\\"] )\"}", hash);
        reply_t by_hash = call(h, "lookup", args);
        check(r.status == TIRASTORE_OK && by_hash.status == TIRASTORE_OK && r.reply && by_hash.reply &&
                  strcmp(r.reply, by_hash.reply) == 0 && contains(&by_hash, "\"source_project\":\"c-test\""),
              "lookup by hash of a cosmetically different schedule: the reply by source (%s)", show(&by_hash));
        free(r.reply);
        free(by_hash.reply);
        snprintf(args, sizeof args, "{%s,\"tiralib_schedule_string\":\"R(L9,comps=['c1'])\"}", hash);
        expect_reply("lookup by hash misses", call(h, "lookup", args), "{\"result\":null}");
        snprintf(args, sizeof args, "{%s,\"tiralib_schedule_string\":\"R(L0\\u0000x\"}", hash);
        r = call(h, "lookup", args);
        check(contains(&r, "NUL character at offset 4"), "lookup by hash: an embedded NUL (%s)", show(&r));
        expect_error("lookup by hash: an embedded NUL", r, TIRASTORE_ERR_VALUE, "ValueError");
        r = call(h, "lookup", "{\"program_name\":\"blur\",\"program_hash\":\"abc\",\"tiralib_schedule_string\":\"R(L0,comps=['c1'])\"}");
        check(contains(&r, "program_hash must be 64"), "lookup by a malformed hash says so (%s)", show(&r));
        expect_error("lookup by a malformed hash", r, TIRASTORE_ERR_VALUE, "ValueError");
        snprintf(args, sizeof args, "{%s,%s,\"program_source_code\":\"void blur() {}\"}", hash, sched);
        expect_error("lookup by hash and source at once", call(h, "lookup", args), TIRASTORE_ERR_TYPE, "TypeError");
        snprintf(args, sizeof args, "{%s,%s}", hash, sched);
        expect_error("lookup by hash on an unknown handle", call(999999, "lookup", args), TIRASTORE_ERR_HANDLE,
                     "ValueError");

        /* record by hash: numbers keep their texts; a program not stored is refused, nothing written. */
        snprintf(args, sizeof args, "{%s,%s,\"is_legal\":true,\"execution_times\":[0.5,12345678901234567890]}", hash, sched);
        expect_reply("record by hash of a key that exists: not written", call(h, "record", args), "{\"result\":false}");
        snprintf(args, sizeof args,
                 "{%s,%s,\"is_legal\":true,\"execution_times\":[0.042,0.039,0.041],\"overwrite\":true}", hash, sched);
        expect_reply("record by hash, overwrite: written", call(h, "record", args), "{\"result\":true}");
        snprintf(args, sizeof args, "{%s,\"tiralib_schedule_string\":\"T(L0,comps=['c1'])\",\"is_legal\":false}", hash);
        r = call(h, "record", args);
        check(contains(&r, "Invalid schedule"), "record by hash of an invalid schedule says so (%s)", show(&r));
        expect_error("record by hash of an invalid schedule", r, TIRASTORE_ERR_VALUE, "ValueError");
        snprintf(args, sizeof args,
                 "{%s,\"tiralib_schedule_string\":\"R(L5,comps=['c1'])\",\"is_legal\":true,\"execution_times\":[\"1\"]}", hash);
        r = call(h, "record", args);
        check(contains(&r, "execution_times[0] must be int or float"), "record by hash: a str among the times (%s)",
              show(&r));
        expect_error("record by hash: a str among the times", r, TIRASTORE_ERR_TYPE, "TypeError");
        r = call(h, "record", "{\"program_name\":\"blur\",\"program_hash\":\"ab\","
                              "\"tiralib_schedule_string\":\"R(L5,comps=['c1'])\",\"is_legal\":false}");
        check(contains(&r, "program_hash must be 64"), "record by a malformed hash says so (%s)", show(&r));
        expect_error("record by a malformed hash", r, TIRASTORE_ERR_VALUE, "ValueError");
        snprintf(args, sizeof args, "{%s,\"tiralib_schedule_string\":\"R(L5,comps=['c1'])\",\"is_legal\":false}", other);
        r = call(h, "record", args);
        check(contains(&r, "is not stored"), "record by the hash of a program not stored says so (%s)", show(&r));
        expect_error("record by the hash of a program not stored", r, TIRASTORE_ERR_NO_PROGRAM, "ProgramNotStoredError");
        snprintf(args, sizeof args, "{%s,\"tiralib_schedule_string\":\"R(L0\\u0000x\",\"is_legal\":false}", hash);
        r = call(h, "record", args);
        check(contains(&r, "NUL character at offset 4"), "record by hash: an embedded NUL (%s)", show(&r));
        expect_error("record by hash: an embedded NUL", r, TIRASTORE_ERR_VALUE, "ValueError");
        snprintf(args, sizeof args, "{%s,%s,\"is_legal\":false}", hash, sched);
        expect_error("record by hash on an unknown handle", call(999999, "record", args), TIRASTORE_ERR_HANDLE,
                     "ValueError");

        /* record_many by hash: all or nothing. */
        snprintf(args, sizeof args,
                 "{%s,\"schedules\":[{%s,\"is_legal\":true,\"execution_times\":[0.5,1e16]}]}", hash, sched);
        expect_reply("record_many by hash of a key that exists: none written", call(h, "record_many", args),
                     "{\"result\":0}");
        snprintf(args, sizeof args,
                 "{%s,\"schedules\":[{\"tiralib_schedule_string\":\"R(L5,comps=['c1'])\",\"is_legal\":false},"
                 "{\"tiralib_schedule_string\":\"T(L0,comps=['c1'])\",\"is_legal\":false}]}", hash);
        r = call(h, "record_many", args);
        check(contains(&r, "Invalid schedule"), "record_many by hash of an invalid schedule says so (%s)", show(&r));
        expect_error("record_many by hash of an invalid schedule: nothing written", r, TIRASTORE_ERR_VALUE, "ValueError");
        snprintf(args, sizeof args,
                 "{%s,\"schedules\":[{\"tiralib_schedule_string\":\"R(L5,comps=['c1'])\",\"is_legal\":true,"
                 "\"execution_times\":[NaN]}]}", hash);
        r = call(h, "record_many", args);
        check(contains(&r, "NaN"), "record_many by hash: a NaN time (%s)", show(&r));
        expect_error("record_many by hash: a NaN time", r, TIRASTORE_ERR_VALUE, "ValueError");
        snprintf(args, sizeof args,
                 "{%s,\"schedules\":[{\"tiralib_schedule_string\":\"R(L5,comps=['c1'])\",\"is_legal\":false}]}", other);
        expect_error("record_many by the hash of a program not stored", call(h, "record_many", args),
                     TIRASTORE_ERR_NO_PROGRAM, "ProgramNotStoredError");
        snprintf(args, sizeof args, "{%s,\"schedules\":[]}", hash);
        expect_reply("record_many by hash of nothing", call(h, "record_many", args), "{\"result\":0}");
    }
    expect_reply("count after record", call(h, "count", "{}"), "{\"result\":1}");

    snprintf(args, sizeof args,
             "{%s,\"schedules\":["
             "{\"tiralib_schedule_string\":\"S(L0,L1,4,8,comps=['c1'])\",\"is_legal\":true,\"execution_times\":[0.04]},"
             "{\"tiralib_schedule_string\":\"I(L0,L1,comps=['c1'])\",\"is_legal\":false,\"execution_times\":null},"
             "{\"tiralib_schedule_string\":\"R(L0,comps=['c1'])\",\"is_legal\":true,\"execution_times\":[0.03,0.031]}]}",
             SRC_ARGS);
    expect_reply("record_many writes the 2 new of 3", call(h, "record_many", args), "{\"result\":2}");
    expect_reply("count after record_many", call(h, "count", NULL), "{\"result\":3}");
    expect_reply("program_count", call(h, "program_count", NULL), "{\"result\":1}");


    r = call(h, "stats", NULL);
    check(r.status == TIRASTORE_OK && contains(&r, "\"total_records\":3") && contains(&r, "\"legal_records\":2") &&
              contains(&r, "\"illegal_records\":1") && contains(&r, "\"total_programs\":1") &&
              contains(&r, "\"source_projects\":[\"c-test\"]") && contains(&r, "\"cpu_model\":\"Test CPU\"") &&
              contains(&r, "\"slurm_cpus\":\"4\""),
          "stats: %s", show(&r));
    free(r.reply);

    r = call(h, "keys", NULL);
    {
        /* {"result":["<64 hex>","<64 hex>","<64 hex>"]} */
        int ok = r.status == TIRASTORE_OK && r.reply != NULL && strncmp(r.reply, "{\"result\":[\"", 12) == 0;
        int quotes = 0;
        for (const char *p = r.reply ? r.reply : ""; *p; p++) {
            quotes += *p == '"';
        }
        ok = ok && quotes == 2 + 3 * 2 && strlen(r.reply) == strlen("{\"result\":[]}") + 3 * 66 + 2;
        check(ok, "keys lists 3 SHA-256 keys: %s", show(&r));
    }
    free(r.reply);
    r = call(h, "keys", "{\"limit\":1,\"offset\":1}");
    check(r.status == TIRASTORE_OK && r.reply != NULL && strlen(r.reply) == strlen("{\"result\":[]}") + 66,
          "keys(limit=1, offset=1) lists 1 key: %s", show(&r));
    free(r.reply);

    snprintf(args, sizeof args, "{\"output_path\":\"%s\",\"fmt\":\"json\"}", export_path);
    expect_ok_with("export json returns the path", call(h, "export", args), "export.json\"}");
    {
        char text[4096] = {0};
        FILE *f = fopen(export_path, "r");
        size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
        if (f) {
            fclose(f);
        }
        check(n > 0 && strstr(text, "\"blur\"") && strstr(text, "\"Tiramisu_cpp\"") && strstr(text, "\"schedules_list\"") &&
                  strstr(text, "I(L0,L1,comps=['c1'])"),
              "export wrote %zu bytes with the blur program and its schedules", n);
    }
    snprintf(args, sizeof args, "{\"output_path\":\"%s\",\"fmt\":\"xml\"}", export_path);
    expect_error("export with fmt xml", call(h, "export", args), TIRASTORE_ERR_VALUE, "ValueError");

    /* --- error paths ---------------------------------------------------- */
    uint64_t h_bad = 0;
    r = open_store(NULL, NULL, &h_bad);
    expect_error("tirastore_open(NULL db_path)", r, TIRASTORE_ERR_MISUSE, "ValueError");
    check(h_bad == 0, "a failed open leaves *handle unchanged");
    r = open_store(db, NULL, NULL);
    expect_error("tirastore_open(NULL handle)", r, TIRASTORE_ERR_MISUSE, "ValueError");
    r = open_store(db, "{\"source_project\":", &h_bad);
    expect_error("tirastore_open(invalid options JSON)", r, TIRASTORE_ERR_MISUSE, "ValueError");
    r = open_store(db, "{\"source_project\":7}", &h_bad);
    expect_error("tirastore_open(source_project as number)", r, TIRASTORE_ERR_TYPE, "TypeError");
    check(tirastore_open(NULL, NULL, &h_bad, NULL) == TIRASTORE_ERR_MISUSE, "tirastore_open(NULL, out NULL) -> MISUSE");

    expect_error("tirastore_call(NULL method)", call(h, NULL, "{}"), TIRASTORE_ERR_MISUSE, "ValueError");
    expect_error("tirastore_call(invalid JSON args)", call(h, "lookup", "{\"program_name\": "), TIRASTORE_ERR_MISUSE,
                 "ValueError");
    expect_error("tirastore_call(args not an object)", call(h, "count", "[1,2]"), TIRASTORE_ERR_MISUSE, "ValueError");
    expect_error("tirastore_call(unknown method)", call(h, "frobnicate", "{}"), TIRASTORE_ERR_MISUSE, "ValueError");
    expect_error("tirastore_call(unknown method, handle 0)", call(0, "frobnicate", NULL), TIRASTORE_ERR_MISUSE,
                 "ValueError");

    snprintf(args, sizeof args, "{\"program_name\":42,\"program_source_code\":\"x\",%s}", sched);
    expect_error("lookup with program_name as a number", call(h, "lookup", args), TIRASTORE_ERR_TYPE, "TypeError");
    snprintf(args, sizeof args, "{%s,%s,\"is_legal\":\"yes\",\"execution_times\":[1]}", SRC_ARGS, sched);
    expect_error("record with is_legal as a string", call(h, "record", args), TIRASTORE_ERR_TYPE, "TypeError");
    snprintf(args, sizeof args, "{%s,%s,\"bogus\":1}", SRC_ARGS, sched);
    expect_error("lookup with an unexpected argument", call(h, "lookup", args), TIRASTORE_ERR_TYPE, "TypeError");
    expect_error("normalize_schedule without its argument", call(0, "normalize_schedule", "{}"), TIRASTORE_ERR_TYPE,
                 "TypeError");

    /* Type errors name the method (a store's as "TiraStore.<method>") and the
       argument. A value a binding cannot write as JSON (a Python bytes, say)
       comes as {"\u0000type": "<type name>"} and is reported by that name. */
    static const struct {
        int store; /* 1: on the store h; 0: a utility (handle 0) */
        const char *method, *args, *message;
    } named[] = {
        {1, "lookup", "{\"program_name\":42,\"program_source_code\":\"x\",\"tiralib_schedule_string\":\"\"}",
         "TiraStore.lookup(): program_name must be str, not int"},
        {1, "lookup", "{\"program_name\":\"p\",\"program_source_code\":{\"\\u0000type\":\"bytes\"},\"tiralib_schedule_string\":\"\"}",
         "TiraStore.lookup(): program_source_code must be str, not bytes"},
        {1, "record_many", "{\"program_name\":\"p\",\"program_source_code\":\"x\",\"schedules\":[{\"\\u0000type\":\"bytes\"}]}",
         "TiraStore.record_many(): schedules[0] must be dict, not bytes"},
        {1, "record_many",
         "{\"program_name\":\"p\",\"program_source_code\":\"x\",\"schedules\":[{\"tiralib_schedule_string\":\"\","
         "\"is_legal\":true,\"execution_times\":[1.0,{\"\\u0000type\":\"complex\"}]}]}",
         "TiraStore.record_many(): schedules[0].execution_times[1] must be int or float, not complex"},
        {0, "normalize_schedule", "{\"schedule\":{\"\\u0000type\":\"bytes\"}}",
         "normalize_schedule(): schedule must be str, not bytes"},
    };
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        r = call(named[i].store ? h : 0, named[i].method, named[i].args);
        check(r.status == TIRASTORE_ERR_TYPE && contains(&r, named[i].message), "%s -> \"%s\": %s", named[i].method,
              named[i].message, show(&r));
        free(r.reply);
    }

    snprintf(args, sizeof args,
             "{%s,\"tiralib_schedule_string\":\"X(L0,comps=['c1'])\",\"is_legal\":true,\"execution_times\":[1.0]}",
             SRC_ARGS);
    r = call(h, "record", args);
    check(contains(&r, "Invalid schedule string"), "record of an invalid schedule says \"Invalid schedule string\"");
    expect_error("record of an invalid schedule", r, TIRASTORE_ERR_VALUE, "ValueError");
    snprintf(args, sizeof args, "{%s,%s,\"is_legal\":true,\"execution_times\":null,\"overwrite\":true}", SRC_ARGS, sched);
    expect_error("record legal without execution_times", call(h, "record", args), TIRASTORE_ERR_VALUE, "ValueError");
    expect_reply("count unchanged by the failed writes", call(h, "count", NULL), "{\"result\":3}");

    /* The kernel-config cache, as a C++ autotuner uses it. */
    expect_reply("config_put writes", call(h, "config_put",
                 "{\"device\":\"gpu:0\",\"op_id\":\"mm@v1\",\"call_key\":\"m=64\",\"value\":{\"bm\":64,\"s\":NaN}}"),
                 "{\"result\":true}");
    expect_reply("config_put overwrite=false keeps the first", call(h, "config_put",
                 "{\"device\":\"gpu:0\",\"op_id\":\"mm@v1\",\"call_key\":\"m=64\",\"value\":1,\"overwrite\":false}"),
                 "{\"result\":false}");
    const char *config_key = "{\"device\":\"gpu:0\",\"op_id\":\"mm@v1\",\"call_key\":\"m=64\"}";
    expect_reply("config_value hit: [value]", call(h, "config_value", config_key),
                 "{\"result\":[{\"bm\":64,\"s\":NaN}]}");
    expect_reply("config_value again, from the cache", call(h, "config_value", config_key),
                 "{\"result\":[{\"bm\":64,\"s\":NaN}]}");
    expect_ok_with("config_get has who and when", call(h, "config_get", config_key), "\"creation_date\":");
    expect_reply("config_value miss", call(h, "config_value", "{\"device\":\"gpu:0\",\"op_id\":\"mm@v1\",\"call_key\":\"x\"}"),
                 "{\"result\":null}");
    expect_error("config_put of a value with a foreign marker", call(h, "config_put",
                 "{\"device\":\"d\",\"op_id\":\"o\",\"call_key\":\"k\",\"value\":{\"\\u0000type\":\"bytes\"}}"),
                 TIRASTORE_ERR_TYPE, "TypeError");
    expect_reply("config_len", call(h, "config_len", NULL), "{\"result\":1}");
    expect_reply("config_put of another value", call(h, "config_put",
                 "{\"device\":\"gpu:0\",\"op_id\":\"mm@v1\",\"call_key\":\"m=64\",\"value\":2}"), "{\"result\":true}");
    expect_reply("config_value sees the put", call(h, "config_value", config_key), "{\"result\":[2]}");
    snprintf(args, sizeof args, "{\"opname\":\"mm\",\"path\":\"%s/mm.json\"}", dir);
    char want[2048];
    snprintf(want, sizeof want,
             "{\"result\":{\"db_path\":\"%s/persistent-cache.tirastore.db\",\"json_path\":\"%s/mm.json\","
             "\"namespace\":\"mm\",\"path\":\"%s/mm.json\",\"sharing\":\"private\",\"db_exists\":false,"
             "\"import_json\":false,\"disabled\":null,\"notices\":[]}}", dir, dir, dir);
    expect_reply("config_location finds a .json path's database and namespace", call(0, "config_location", args), want);
    expect_error("config_check: a config call's arguments checked without a store",
                 call(0, "config_check", "{\"call\":\"config_put\",\"device\":1,\"op_id\":\"o\",\"call_key\":\"k\"}"),
                 TIRASTORE_ERR_TYPE, "TypeError");
    expect_reply("config_check of good arguments",
                 call(0, "config_check", "{\"call\":\"config_put\",\"device\":\"d\",\"op_id\":\"o\",\"call_key\":\"k\"}"),
                 "{\"result\":null}");
    snprintf(args, sizeof args, "{\"output_path\":\"%s/configs.json\"}", dir);
    expect_ok_with("config_export", call(h, "config_export", args), "\"entries\":1");
    snprintf(args, sizeof args, "{\"path\":\"%s/configs.json\",\"once\":true}", dir);
    expect_ok_with("config_import once of the exported file is skipped", call(h, "config_import", args),
                   "\"skipped\":true");
    expect_reply("config_delete", call(h, "config_delete", config_key), "{\"result\":true}");
    expect_reply("config_clear of an empty table", call(h, "config_clear", NULL), "{\"result\":0}");

    expect_error("lookup on unknown handle 999999", call(999999, "lookup", lookup_args), TIRASTORE_ERR_HANDLE,
                 "ValueError");
    expect_error("lookup on handle 0 (utilities only)", call(0, "lookup", lookup_args), TIRASTORE_ERR_HANDLE,
                 "ValueError");
    r = close_store(999999);
    expect_error("tirastore_close(unknown handle 999999)", r, TIRASTORE_ERR_HANDLE, "ValueError");

    /* A second handle on the same file: close it twice, then use it. */
    uint64_t h2 = 0;
    r = open_store(db, "{\"source_project\":\"c-test-2\",\"cpu_model\":\"Test CPU\",\"slurm_cpus\":\"4\"}", &h2);
    check(r.status == TIRASTORE_OK && h2 != 0 && h2 != h, "second handle on the same database: %llu (first %llu)",
          (unsigned long long)h2, (unsigned long long)h);
    free(r.reply);
    expect_reply("the second handle sees the first one's records", call(h2, "count", NULL), "{\"result\":3}");
    r = close_store(h2);
    check(r.status == TIRASTORE_OK && equals(&r, "{\"result\":null}"), "tirastore_close(h2) -> %d: %s", r.status,
          show(&r));
    free(r.reply);
    r = close_store(h2);
    expect_error("tirastore_close(h2) again", r, TIRASTORE_ERR_HANDLE, "ValueError");
    check(tirastore_close(h2, NULL) == TIRASTORE_ERR_HANDLE, "tirastore_close(h2, out NULL) a third time -> HANDLE");
    expect_error("call after close", call(h2, "count", NULL), TIRASTORE_ERR_HANDLE, "ValueError");
    expect_reply("the first handle still works", call(h, "count", NULL), "{\"result\":3}");

    /* Claims: a miss is claimed (a token), a second ask without waiting
       finds it busy, claim_record records and ends it, then it is a hit. */
    snprintf(args, sizeof args, "{%s,\"tiralib_schedule_string\":\"U(L2,4,comps=['c1'])\",\"lease\":5}", SRC_ARGS);
    r = call(h, "lookup_or_claim", args);
    char token[40] = "";
    const char *t = r.reply ? strstr(r.reply, "\"token\":\"") : NULL;
    if (t != NULL) {
        snprintf(token, sizeof token, "%.32s", t + strlen("\"token\":\""));
    }
    check(r.status == TIRASTORE_OK && contains(&r, "{\"result\":{\"claim\":") && strlen(token) == 32 &&
              contains(&r, "\"lease\":5.0"),
          "lookup_or_claim of a miss claims it: %s", show(&r));
    free(r.reply);
    snprintf(args, sizeof args, "{%s,\"tiralib_schedule_string\":\"U(L2,4,comps=['c1'])\",\"wait\":false}", SRC_ARGS);
    expect_ok_with("lookup_or_claim of a claimed schedule, wait false: busy", call(h, "lookup_or_claim", args),
                   "{\"result\":{\"busy\":{");
    expect_ok_with("claims lists it", call(h, "claims", NULL), "\"tiralib_schedule_string\":\"U(L2,4,comps=['c1'])\"");
    snprintf(args, sizeof args, "{\"token\":\"%s\",\"is_legal\":true,\"execution_times\":[0.5]}", token);
    expect_reply("claim_record records", call(h, "claim_record", args), "{\"result\":true}");
    expect_error("claim_record of an ended claim", call(h, "claim_record", args), TIRASTORE_ERR_VALUE, "ValueError");
    snprintf(args, sizeof args, "{%s,\"tiralib_schedule_string\":\"U(L2,4,comps=['c1'])\"}", SRC_ARGS);
    expect_ok_with("lookup_or_claim after the record: the result", call(h, "lookup_or_claim", args),
                   "{\"result\":{\"result\":{\"is_legal\":true,\"execution_times\":[0.5]");
    expect_reply("no claims left", call(h, "claims", NULL), "{\"result\":[]}");
    snprintf(args, sizeof args, "{%s,\"tiralib_schedule_string\":\"U(L2\"}", SRC_ARGS);
    expect_error("lookup_or_claim of an invalid schedule", call(h, "lookup_or_claim", args), TIRASTORE_ERR_VALUE,
                 "ValueError");
    expect_reply("count after the claim", call(h, "count", NULL), "{\"result\":4}");

    tirastore_free(NULL);
    check(1, "tirastore_free(NULL) is a no-op");

    check(tirastore_close(h, NULL) == TIRASTORE_OK, "tirastore_close(h, out NULL) -> OK");
    expect_error("call after the last close", call(h, "count", NULL), TIRASTORE_ERR_HANDLE, "ValueError");
    snprintf(args, sizeof args, "{\"result\":\"%s\"}", version);
    expect_reply("utilities still work with no store open", call(0, "version", NULL), args);

    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    check(access(dir, F_OK) != 0, "temporary directory %s removed", dir);

    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
