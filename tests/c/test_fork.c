/*
 * fork() and the C ABI: a child made by fork() after the library was loaded
 * gets TIRASTORE_ERR_FORKED with a message, not a hang, while the parent
 * keeps working. Negative control: the same call made straight into the Go
 * export (tirastoreGo_call, what the guard protects) hangs in the child.
 * Prints "N passed, M failed".
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tirastore.h"

extern int tirastoreGo_call(uint64_t handle, char *method, char *args_json, char **out);

static int passed, failed;

static void check(int ok, const char *what) {
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (ok) passed++; else failed++;
}

/* Runs fn in a child with a 10 s alarm; returns its wait status. */
static int in_child(int (*fn)(uint64_t), uint64_t h) {
	pid_t pid = fork();
	if (pid == 0) {
		alarm(10);
		_exit(fn(h));
	}
	int st = 0;
	waitpid(pid, &st, 0);
	return st;
}

static int child_guarded(uint64_t h) {
	char *out = NULL;
	int rc = tirastore_call(h, "count", NULL, &out);
	int ok = rc == TIRASTORE_ERR_FORKED && out && strstr(out, "fork()") && strstr(out, "\"code\":14");
	printf("     child: status %d: %s\n", rc, out ? out : "(null)");
	tirastore_free(out);
	ok = ok && tirastore_open("/nonexistent/x.db", NULL, &h, NULL) == TIRASTORE_ERR_FORKED;
	ok = ok && tirastore_version() && strlen(tirastore_version()) > 0;
	out = NULL;
	ok = ok && tirastore_close(h, &out) == TIRASTORE_ERR_FORKED && out && strstr(out, "\"code\":14");
	tirastore_free(out);
	return ok ? 0 : 1;
}

/* Progress of the unguarded child, in memory shared with the parent. */
static struct progress { volatile long calls; volatile double last; } *progress;

static double now_seconds(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* h2 is a store of its own: the child's call may take its lock and die
 * holding it, under the parent's pid (the record was made in the parent).
 * A single call may happen to complete (it may need no other thread of the
 * runtime); calls in a loop soon need one (a garbage collection stops the
 * world, whose other threads did not survive fork) and hang. */
static int child_unguarded(uint64_t h2) {
	char *out = NULL;
	alarm(4);
	for (;;) {
		tirastoreGo_call(h2, "count", NULL, &out);
		progress->calls++;
		progress->last = now_seconds();
	}
	return 0;
}

int main(void) {
	setvbuf(stdout, NULL, _IONBF, 0); /* no buffered output duplicated into children */
	/* in $TMPDIR (the test run's own, tests/isolate), else /tmp */
	const char *tmp = getenv("TMPDIR");
	char dir[200];
	snprintf(dir, sizeof dir, "%s/tirastore-fork-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) { perror("mkdtemp"); return 2; }
	char db[256];
	snprintf(db, sizeof db, "%s/cache.db", dir);
	uint64_t h = 0;
	char *out = NULL;
	int rc = tirastore_open(db, "{\"cpu_model\":\"C test\"}", &h, &out);
	tirastore_free(out);
	check(rc == TIRASTORE_OK, "open in the parent");
	rc = tirastore_call(h, "count", NULL, &out);
	tirastore_free(out);
	check(rc == TIRASTORE_OK, "call in the parent before fork");

	int st = in_child(child_guarded, h);
	check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child gets TIRASTORE_ERR_FORKED with a message, no hang");

	char db2[256];
	snprintf(db2, sizeof db2, "%s/other.db", dir);
	uint64_t h2 = 0;
	check(tirastore_open(db2, "{\"cpu_model\":\"C test\"}", &h2, NULL) == TIRASTORE_OK, "open a second store");
	progress = mmap(NULL, sizeof *progress, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	check(progress != MAP_FAILED, "shared memory for the child's progress");
	double started = now_seconds();
	st = in_child(child_unguarded, h2);
	double ended = now_seconds();
	/* Hung: killed by the alarm, with no call completed in its last second. */
	double quiet = ended - (progress->calls ? progress->last : started);
	printf("     unguarded child: %ld calls, then %.1f s without progress\n", progress->calls, quiet);
	check(WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM && quiet > 1.0,
	      "negative control: the unguarded Go entry hangs in the child");

	rc = tirastore_call(h, "count", NULL, &out);
	check(rc == TIRASTORE_OK && out && strcmp(out, "{\"result\":0}") == 0, "the parent keeps working after the forks");
	tirastore_free(out);
	tirastore_close(h, NULL);
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
