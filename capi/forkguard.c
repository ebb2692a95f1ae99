// The public entry points of libtirastore.so. Each checks, before entering
// Go, that this process is not a child forked after the library was loaded:
// only the forking thread survives fork(), so the Go runtime's threads are
// gone and a call into Go would hang forever. Such a call returns
// TIRASTORE_ERR_FORKED instead. Everything here is plain C because the
// check must not touch the Go runtime. See capi.go for the documentation of
// each function (include/tirastore.h is generated from it).

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_cgo_export.h"
#include "tirastore.h" // the status codes (generated from core/apierr); also checks these definitions

// The reply of a call in a forked child: made at load time by capi.go
// (init) from the error table, like every other reply; never freed.
const char *tirastore_forked_reply;

static volatile int tirastore_forked;
static const char *volatile tirastore_version_cache;

static void tirastore_after_fork_in_child(void) { tirastore_forked = 1; }

__attribute__((constructor)) static void tirastore_register_fork_guard(void) {
	pthread_atfork(NULL, NULL, tirastore_after_fork_in_child);
}

static int tirastore_forked_error(char **out) {
	if (out != NULL) {
		const char *r = tirastore_forked_reply;
		*out = r != NULL ? strdup(r) : NULL;
	}
	return TIRASTORE_ERR_FORKED;
}

const char *tirastore_version(void) {
	if (tirastore_forked) {
		const char *v = tirastore_version_cache;
		return v != NULL ? v : "unknown (forked child)";
	}
	const char *v = tirastoreGo_version();
	tirastore_version_cache = v;
	return v;
}

int tirastore_open(const char *db_path, const char *options_json, uint64_t *handle, char **out) {
	if (tirastore_forked) return tirastore_forked_error(out);
	return tirastoreGo_open((char *)db_path, (char *)options_json, handle, out);
}

int tirastore_close(uint64_t handle, char **out) {
	if (tirastore_forked) return tirastore_forked_error(out);
	return tirastoreGo_close(handle, out);
}

int tirastore_call(uint64_t handle, const char *method, const char *args_json, char **out) {
	if (tirastore_forked) return tirastore_forked_error(out);
	return tirastoreGo_call(handle, (char *)method, (char *)args_json, out);
}

void tirastore_free(const char *buf) {
	// Replies are allocated with malloc (C.CBytes in Go, strdup above):
	// free() releases them without entering Go, also in a forked child.
	free((void *)buf);
}
