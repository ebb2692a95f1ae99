// What libtirastore.so needs of the process's address space, and what it
// does about it before its Go runtime starts (docs/limits.md, "Address
// space"). Plain C: this runs before the Go runtime exists.
//
// Under an address-space limit (RLIMIT_AS: `ulimit -v`, or a Slurm job
// whose memory request is turned into one), a Go runtime that does not fit
// aborts the whole process ("fatal error: out of memory allocating heap
// arena map", "runtime/cgo: pthread_create failed") when the library is
// loaded: nothing can catch that. So:
//
//  - The figures below are the one statement of what the library needs. They
//    are compiled into the library twice: as the macros the constructor
//    uses, and as a text in the section .tirastore_addrspace, which the
//    Python package reads out of the file before it loads it (it checks
//    first and raises MemoryError instead of loading a runtime that cannot
//    start; python/tirastore/_address_space.py).
//
//  - A constructor that runs before the Go runtime's own (priority 101;
//    the runtime starts from a constructor without one) caps glibc's malloc
//    arenas at one when a limit is set, unless the user chose a number
//    (MALLOC_ARENA_MAX or the tunable glibc.malloc.arena_max), and writes
//    a diagnostic to stderr when the limit leaves the runtime too little
//    room. It cannot refuse the load (a constructor has no way to fail
//    dlopen, and the runtime starts right after it whatever it does); it
//    does not exit either: the figures carry a margin, and a program that
//    would have run should not be stopped by an estimate.
//
// Why the arena cap: every thread that calls malloc gets an arena of its
// own (up to 8 per core), each a 64 MiB reservation, and every Go thread
// does (cgo's thread start frees a block). Under a limit, the arenas of
// the runtime's first threads take the room the runtime needs next for a
// thread stack or its heap, so whether it starts depends on the order in
// which threads ran: measured on 2 cores, loads failed at limits anywhere
// up to 1.1 GiB, and passed below. A glibc that cannot make an arena uses
// an existing one, so the cap costs no failure, only contention on the
// one arena, and only in a process that has a limit. With it, what the
// library needs is a fixed figure.
//
// What the Go runtime (1.26, linux/amd64) reserves when it starts, all of it
// counted by RLIMIT_AS though almost none is touched: the library's own
// image (46 MiB, 32 of them zero-filled data); a stack for each of its
// threads (glibc's default: RLIMIT_STACK, 8 MiB on most systems, 2 MiB if
// unlimited), some eight once a store is open, more with more Ps; the page
// allocator's summaries, 585 MiB (its radix tree for a 48-bit address
// space, runtime/mpagealloc_64bit.go); a 64 MiB heap arena and the 32 MiB
// index of heap arenas. No GODEBUG or runtime setting changes any of these;
// they follow from the constant heapAddrBits (golang/go#38010).
//
// Then the runtime tries to reserve 512 MiB more for its scavenger's index.
// Where that fails the runtime does not notice (it keeps the nil base) and
// maps the index pages it uses at their offset from address zero, with
// MAP_FIXED, somewhere in the lowest 512 MiB of the address space: it
// runs in less room, but replaces whatever is mapped where those pages land.
// A position-dependent executable (Debian's /usr/bin/python3, a program
// linked with -no-pie) and its brk heap live there, and that
// replacement was seen to corrupt Python's heap ("free(): invalid
// pointer"). Where the reservation succeeds it takes 512 MiB of the
// headroom, and a limit that leaves less than the rest after it aborts
// the runtime: there is a band of limits, about 140 MiB wide above
// 1.15 GiB of headroom, in which the library cannot start though it can
// below. Hence two figures: what the runtime needs when the index does
// not fit (only acceptable when nothing is mapped in the lowest 512 MiB)
// and what it needs when it does.

#define _GNU_SOURCE
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

// The figures, in MiB unless named otherwise. Measured with Go 1.26 on
// linux/amd64 (docs/limits.md gives the runs); a new Go toolchain, or a
// library grown by tens of MiB, means measuring them again (the tests of
// tests/python/test_address_space.py show whether they still hold).
//
// BASE: what the runtime and the first calls (open a store, record, look
// up) need beyond the library's image, its thread stacks and the optional
// index: the summaries, the first heap arena and its index, the runtime's
// first allocations, and SQLite's. Measured: 686 (the smallest room in
// which every run passed, less the image and 8 stacks with GOMAXPROCS=2,
// 14 with 64, with 8 and with 2 MiB stacks alike); the figure adds 60, about
// one more heap arena (the heap grows by 64 MiB reservations).
#define TIRASTORE_AS_BASE_MIB 746
// THREADS, PROCS_PER_THREAD: the thread stacks counted, each the size
// glibc gives a thread by default: THREADS, and one more for every
// PROCS_PER_THREAD Ps of the runtime (GOMAXPROCS: its environment
// variable, else the CPUs the process may use). Measured: the room needed
// matches 8 stacks with GOMAXPROCS=2 and 14 with 64 (4 to 9 threads alive
// after the first calls), and with more Ps the runtime's own allocations
// grow too (single runs needed 850 MiB with 32 and 64 Ps, against 772
// with 2); the figure counts 9 stacks with 2 Ps, 16 with 32, 24 with 64.
// More threads come with concurrent calls (docs/limits.md).
#define TIRASTORE_AS_THREADS 8
#define TIRASTORE_AS_PROCS_PER_THREAD 4
// OPTIONAL: the scavenger index the runtime reserves when it fits, 512 MiB
// ((1 << 48) / 4 MiB chunks * 8 bytes); also the size of the low region in
// which its pages land when it does not.
#define TIRASTORE_AS_OPTIONAL_MIB 512
// BEFORE: what the runtime has reserved before it tries the optional
// index, beyond the image and its first thread's stack: the page
// summaries, a lower bound (so that the room where the index surely fails
// is never overstated).
#define TIRASTORE_AS_BEFORE_MIB 585
// ARENA: a glibc malloc arena's reservation, counted for each of the
// threads counted when the user allowed more arenas than one.
#define TIRASTORE_AS_ARENA_MIB 64

#define TIRASTORE_AS_STR_(x) #x
#define TIRASTORE_AS_STR(x) TIRASTORE_AS_STR_(x)

// The figures as the Python package reads them from the file (one line of
// key=value words; a reader ignores keys it does not know).
__attribute__((used, section(".tirastore_addrspace"))) static const char tirastore_addrspace_figures[] =
	"tirastore-address-space 1"
	" base_mib=" TIRASTORE_AS_STR(TIRASTORE_AS_BASE_MIB)
	" threads=" TIRASTORE_AS_STR(TIRASTORE_AS_THREADS)
	" procs_per_thread=" TIRASTORE_AS_STR(TIRASTORE_AS_PROCS_PER_THREAD)
	" optional_mib=" TIRASTORE_AS_STR(TIRASTORE_AS_OPTIONAL_MIB)
	" before_mib=" TIRASTORE_AS_STR(TIRASTORE_AS_BEFORE_MIB)
	" arena_mib=" TIRASTORE_AS_STR(TIRASTORE_AS_ARENA_MIB)
	"\n";

#define MIB (1024.0 * 1024.0)

// The process's address space in use (VmSize), in bytes; 0 if unknown.
static double tirastore_as_vmsize(void) {
	char buf[128];
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (fd < 0) return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0) return 0;
	buf[n] = 0;
	return strtod(buf, NULL) * (double)sysconf(_SC_PAGESIZE);
}

// Whether anything is mapped below the optional index's size (where the
// runtime maps that index when it could not reserve it); 1 if unknown.
static int tirastore_as_low_region_used(void) {
	char buf[4096];
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0) return 1;
	unsigned long long start = 0;
	int at_start = 1, in_number = 1, used = 0;
	ssize_t n;
	while (!used && (n = read(fd, buf, sizeof buf)) > 0) {
		for (ssize_t i = 0; i < n && !used; i++) {
			char c = buf[i];
			if (at_start) {
				start = 0;
				in_number = 1;
				at_start = 0;
			}
			if (c == '\n') {
				at_start = 1;
			} else if (in_number) {
				int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
				if (d < 0) {
					in_number = 0;
					used = start < ((unsigned long long)TIRASTORE_AS_OPTIONAL_MIB << 20);
				} else {
					start = start * 16 + (unsigned long long)d;
				}
			}
		}
	}
	close(fd);
	return n < 0 ? 1 : used;
}

// The arenas the user allowed: 0 if not set, else the number (a value of
// 0 being glibc's default, 8 per core, counted as unlimited: -1).
static int tirastore_as_user_arenas(void) {
	const char *v = getenv("MALLOC_ARENA_MAX");
	const char *t = getenv("GLIBC_TUNABLES");
	const char *key = "glibc.malloc.arena_max=";
	if (t != NULL && (t = strstr(t, key)) != NULL) v = t + strlen(key);  // the tunable wins, as in glibc
	if (v == NULL || *v == 0) return 0;
	int n = atoi(v);
	return n > 0 ? n : -1;
}

// The Ps the runtime will have: GOMAXPROCS if it is a number > 0, else the
// CPUs this process may run on (Go also lowers it to a cgroup's CPU quota:
// not counted here, which only overstates).
static int tirastore_as_procs(void) {
	const char *v = getenv("GOMAXPROCS");
	if (v != NULL && *v != 0) {
		char *end;
		long n = strtol(v, &end, 10);
		if (*end == 0 && n > 0) return n > 1 << 16 ? 1 << 16 : (int)n;
	}
	cpu_set_t set;
	if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

__attribute__((constructor(101))) static void tirastore_address_space_preflight(void) {
	struct rlimit as;
	if (getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return;
	int arenas = tirastore_as_user_arenas();
#ifdef M_ARENA_MAX
	if (arenas == 0) {
		mallopt(M_ARENA_MAX, 1);
		arenas = 1;
	}
#else
	if (arenas == 0) arenas = -1;
#endif
	double used = tirastore_as_vmsize();
	if (used <= 0) return;
	// A thread stack as the runtime's threads get it: glibc's default size
	// (pthread_attr_init leaves it to the default) and its guard page.
	size_t stack = 8u << 20, guard = 4096;
	pthread_attr_t attr;
	if (pthread_attr_init(&attr) == 0) {
		pthread_attr_getstacksize(&attr, &stack);
		pthread_attr_getguardsize(&attr, &guard);
		pthread_attr_destroy(&attr);
	}
	double per_thread = (double)stack + (double)guard;
	int procs = tirastore_as_procs();
	int threads = TIRASTORE_AS_THREADS + (procs + TIRASTORE_AS_PROCS_PER_THREAD - 1) / TIRASTORE_AS_PROCS_PER_THREAD;
	int extra_arenas = arenas < 0 ? threads : arenas - 1;
	if (extra_arenas > threads) extra_arenas = threads;
	// The image is mapped already (it is part of used).
	double need = TIRASTORE_AS_BASE_MIB * MIB + threads * per_thread + extra_arenas * TIRASTORE_AS_ARENA_MIB * MIB;
	double full = need + TIRASTORE_AS_OPTIONAL_MIB * MIB;
	double index_fails_below = (TIRASTORE_AS_BEFORE_MIB + TIRASTORE_AS_OPTIONAL_MIB) * MIB + per_thread;
	double room = (double)as.rlim_cur - used;
	// A few MiB of slack: the Python package checked this already, before
	// the loader mapped the image and its own few pages, and must not be
	// contradicted at its boundary.
	room += 4 * MIB;
	if (room >= full) return;
	int low_used = tirastore_as_low_region_used();
	int window = need < index_fails_below && !low_used;  // where the runtime may run without the index
	if (window && room >= need && room < index_fails_below) return;
	double want = window && room < need ? need : full;
	const char *why = "";
	if (want == full) {
		if (low_used)
			why = " (its optional 512 MiB index included: the lowest 512 MiB of the address space are in use, "
			      "where its pages would go otherwise)";
		else if (window)
			why = " (at this limit its optional 512 MiB index fits, and then the rest does not)";
		else
			why = " (its optional 512 MiB index included)";
	}
	unsigned long long min_mib = (unsigned long long)((used + want) / MIB) + 1;
	char msg[1024];
	int len = snprintf(msg, sizeof msg,
	                   "libtirastore: the address-space limit (RLIMIT_AS, ulimit -v) is %.0f MiB and this process uses "
	                   "%.0f MiB of it; the library's Go runtime needs %.0f MiB more to start%s, so it will most likely "
	                   "abort the process now (\"fatal error: out of memory\" or \"pthread_create failed\"). Start the "
	                   "process with a limit of at least %llu MiB (ulimit -v %llu) or none: see \"Address space\" in "
	                   "TiraStore's docs/limits.md.\n",
	                   (double)as.rlim_cur / MIB, used / MIB, want / MIB, why, min_mib, min_mib * 1024);
	if (len > 0) {
		ssize_t ignored = write(2, msg, (size_t)len < sizeof msg ? (size_t)len : sizeof msg - 1);
		(void)ignored;
	}
}
