# TiraStore — see README.md. `make demo` and `make test` work on a fresh
# machine with Go >= 1.22, a C/C++ compiler and CPython >= 3.9 with venv.
#
# Every target that runs Python uses a virtualenv of the project (VENV,
# ./.venv by default), made from PYTHON3 on first use: nothing is installed
# into the system's or the user's Python (Debian's is externally managed,
# PEP 668, and other projects share it).
VENV    ?= .venv
PYTHON3 ?= python3
GO      ?= go
CXX     ?= g++
CC      ?= gcc
# An absolute path: the benchmark and the tests start it from other
# directories.
PYTHON  := $(abspath $(VENV))/bin/python
ifeq ($(strip $(VENV)),)
$(error VENV is empty: it names the virtualenv's directory, ./.venv by default)
endif
# Test commands run as in the activated venv: the Go tests and the scripts
# the tests start call `python3` by name (core/internal/pytest honours
# TIRASTORE_TEST_PYTHON, the benchmark's smoke test takes python3 from
# PATH), and they need the venv's packages (cffi, py-cpuinfo, pytest).
IN_VENV := PATH="$(abspath $(VENV))/bin:$$PATH" VIRTUAL_ENV="$(abspath $(VENV))" TIRASTORE_TEST_PYTHON="$(PYTHON)"
export CGO_ENABLED := 1
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# A PIP_USER=1 in the caller's environment would make pip refuse to install
# into the venv.
export PIP_USER := 0

LIB := build/libtirastore.so

.PHONY: all build build-failpoints venv install pydeps ejkernel-venv test soak test-go test-python test-c lint header demo bench screenshot fusebed torture clean

all: build

# The shared library (build/ and python/tirastore/) via build.sh.
build:
	./build.sh

# The virtualenv. A failed attempt leaves no half-made venv behind (the next
# run would take it for a good one), and a VENV that is something else than
# a venv is never removed. Debian and Ubuntu ship venv's ensurepip in a
# separate package, python3-venv, hence the check first. pip < 21.3 (bundled
# with some Python 3.9) cannot make editable installs from pyproject.toml
# alone (PEP 660): it is upgraded in the venv.
venv: $(PYTHON)

$(PYTHON):
	@command -v $(PYTHON3) >/dev/null 2>&1 || { echo "make: $(PYTHON3) not found: the Makefile needs CPython >= 3.9 (or PYTHON3=/path/to/python3)" >&2; exit 1; }
	@$(PYTHON3) -c 'import sys; sys.exit(sys.version_info < (3, 9))' || { echo "make: $(PYTHON3) is older than Python 3.9, which tirastore needs (choose another with PYTHON3=...)" >&2; exit 1; }
	@if [ -e $(VENV) ] && [ ! -f $(VENV)/pyvenv.cfg ] && [ -n "$$(ls -A $(VENV) 2>/dev/null)" ]; then \
	    echo "make: $(VENV) exists and is not a virtualenv: remove it or choose another with VENV=..." >&2; exit 1; \
	fi
	@rm -rf $(VENV)
	@if ! $(PYTHON3) -c 'import venv, ensurepip' >/dev/null 2>&1 || ! $(PYTHON3) -m venv $(VENV); then \
	    rm -rf $(VENV); \
	    echo "make: could not create the virtualenv $(VENV) with '$(PYTHON3) -m venv'." >&2; \
	    echo "make: on Debian/Ubuntu install the venv module first: apt install python3-venv" >&2; \
	    exit 1; \
	fi
	@$(PYTHON) -c 'import sys, pip; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (21, 3))' || \
	    $(PYTHON) -m pip install -q --upgrade "pip>=21.3" || { rm -rf $(VENV); exit 1; }
	@echo "make: created the virtualenv $(VENV) ($$($(PYTHON) -V))"

# The Python package in editable mode in the venv, with its test
# dependencies; the build backend compiles the Go library
# (python/hatch_build.py).
install: $(PYTHON)
	$(PYTHON) -m pip install -q -e ".[dev]"

# For targets that only need the runtime dependencies importable (bench and
# torture put this tree's package on the path themselves): install once.
pydeps: $(PYTHON)
	@$(PYTHON) -c 'import cffi' 2>/dev/null || $(MAKE) --no-print-directory install

# The released ejkernel with CPU jax, for tests/python/test_ejkernel.py and
# the bench's import row: a venv of its own,
# build/ejkernel-venv-<key>, keyed by the pins of pyproject.toml's extra
# ejkernel-test (read there, the one place they are written); nothing is done
# when that venv is complete. It needs CPython >= 3.11 (jax), made from
# EJKERNEL_PYTHON3 (PYTHON3 by default). pip's output goes to
# build/ejkernel-venv-<key>.log.
EJKERNEL_PYTHON3 ?= $(PYTHON3)
ejkernel-venv:
	@$(EJKERNEL_PYTHON3) tests/python/ejkernel_env.py make

lint:
	@out="$$(gofmt -l capi core tests 2>/dev/null)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run ./capi/genheader -check
	$(PYTHON3) tests/docs_links.py

# Test tiers (docs/design.md, "Tests and tiers"). `make test` is the
# fast tier: every test but the soak-only runs, each with its negative
# control, fleets and stress runs at the size that still shows their
# property (go test -short; pytest -m "not soak"). `make soak` is the long
# tier: the same fleets at full size and the soaks (go test without -short;
# pytest -m soak; the benchmark's -quick run is TestQuickRun there). Every
# test command runs under tests/isolate: a TMPDIR and HOME of the run's own,
# so that two runs at once, or another user's files in /tmp, change nothing.
ISOLATE := tests/isolate
# pytest-xdist workers: most tests wait (for a lock, a child, a server), so
# more workers than cores pay; TEST_JOBS=0 runs in one process.
TEST_JOBS ?= 6
# The soak tier's tests each load the machine (1,000 forks, sixteen jax
# processes, 500 PgBouncer clients): two at a time, so that the bounds of
# the stall tests that run beside them still mean what they say.
SOAK_JOBS ?= 2
PYTEST := $(PYTHON) -m pytest -q -rs -p no:cacheprovider
# Test binaries at once: like pytest's workers, most Go tests wait, not compute.
GOTEST := $(GO) test -race -count=1 -p 8

# The differential tests compare the Go code with CPython in the venv.
test-go: install
	$(IN_VENV) $(ISOLATE) $(GOTEST) -short ./...
	$(IN_VENV) $(ISOLATE) $(GOTEST) -short -tags failpoints ./core/failpoint/

test-c: build
	$(CC) -std=c11 -Wall -Wextra -Werror -Iinclude tests/c/test_capi.c -Lbuild -ltirastore -Wl,-rpath,$(CURDIR)/build -o build/test_capi
	$(ISOLATE) ./build/test_capi
	$(CXX) -std=c++17 -Wall -Wextra -Werror -Iinclude examples/harness.cpp -Lbuild -ltirastore -Wl,-rpath,$(CURDIR)/build -o build/harness
	$(ISOLATE) sh -c './build/harness "$$TMPDIR/harness-test.db"'
	$(CC) -std=c11 -Wall -Wextra -Werror -Iinclude tests/c/test_fork.c -Lbuild -ltirastore -Wl,-rpath,$(CURDIR)/build -o build/test_fork
	$(ISOLATE) ./build/test_fork
	CC="$(CC)" CXX="$(CXX)" $(ISOLATE) tests/c/readme_snippet.sh

# The test variant of the library with failpoints compiled in (crash tests).
build-failpoints:
	./build.sh failpoints

# The API modules run a second time on the PostgreSQL backend, each test on
# a schema of its own in a throwaway cluster that the session starts
# (tests/pg/pgcluster.py: initdb on a socket in a temporary directory; it
# needs Debian's postgresql package, which .ci/run installs; without it those
# tests skip, except under CI=true). test_postgres.py, in the first run,
# holds what only the server has: restarts, TLS, passwords, 64 processes.
PG_API_TESTS := test_store_api.py test_bad_input.py test_export_backup.py test_claims.py \
	test_cpu_metadata.py test_config_methods.py test_lookup_path.py
test-python: install build-failpoints ejkernel-venv
	$(IN_VENV) $(ISOLATE) $(PYTEST) -n $(TEST_JOBS) -m "not soak" tests/python
	cd tests/python && TIRASTORE_TEST_BACKEND=postgresql $(IN_VENV) ../isolate $(PYTEST) -n $(TEST_JOBS) -m "not soak" $(PG_API_TESTS)
	$(IN_VENV) $(ISOLATE) $(PYTHON) -m pytest -q -p no:cacheprovider --doctest-modules python/tirastore

# The fast tier (the README's command; .ci/run runs it, then soak and torture).
test: lint test-go test-c test-python

# The long tier.
soak: install build-failpoints ejkernel-venv fusebed
	$(IN_VENV) $(ISOLATE) $(GOTEST) -timeout 30m ./...
	$(IN_VENV) $(ISOLATE) $(PYTEST) -n $(SOAK_JOBS) -m soak tests/python

# The main job: an autoscheduler-like workload on ./tirastore-demo/cache.db.
demo: install
	$(PYTHON) examples/demo.py --db tirastore-demo/cache.db

# The benchmark: the engine from Go, Python and ctypes against the
# original's per-operation protocol (tests/bench/baseline), same run, same
# disk: a table on stdout and build/bench/results.{json,txt}. Python rows use
# this tree's package and library (PYTHONPATH/TIRASTORE_LIB set by the tool);
# only cffi must be importable in the venv, so `make install` runs only when
# it is not. The ejkernel import row runs in the venv of
# `make ejkernel-venv`, made here when missing; if it cannot be made, the
# row says so and the rest runs.
# BENCHFLAGS: e.g. -quick, -dir /lustre/scratch/me/bench, -procs 1,8,64.
BENCHFLAGS ?=
bench: build pydeps
	@$(MAKE) --no-print-directory ejkernel-venv || echo "make bench: no ejkernel venv: the ejkernel import row will say why it is skipped" >&2
	$(GO) build -o build/bench/tirastore-bench ./tests/bench
	./build/bench/tirastore-bench -python $(PYTHON) $(BENCHFLAGS)

# The README's picture of `tirastore dashboard` (docs/dashboard.png): a
# three-hour search of the demo's programs by four nodes, in headless
# chromium (tests/python/readme_screenshot.py).
screenshot: install
	$(IN_VENV) $(PYTHON) tests/python/readme_screenshot.py

# The Lustre-like FUSE test bed (tests/fusebed/main.go documents it).
fusebed: ; go build -o build/fusebed ./tests/fusebed

# The local torture run of the lock on the FUSE bed (tests/multinode/torture.py):
# 8 simulated nodes x 8 workers on one database, SIGKILLs inside and outside
# the lock, restarts, exact verification; then the negative control (the lock
# switched off, smaller), which must fail verification.
torture: build build-failpoints fusebed pydeps
	$(IN_VENV) $(ISOLATE) $(PYTHON) tests/multinode/torture.py
	$(IN_VENV) $(ISOLATE) $(PYTHON) tests/multinode/torture.py --no-lock --expect-failure --nodes 4 --per-node 4 --nrecords 8 --ncontested 6 --kills 5

clean:
	rm -rf build dist python/tirastore/libtirastore.so tirastore-demo .pytest_cache
	[ ! -f $(VENV)/pyvenv.cfg ] || rm -rf $(VENV)
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
