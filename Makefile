# TiraStore — see README.md. `make demo` and `make test` work on a fresh
# machine with Go >= 1.22, a C/C++ compiler and CPython 3 with pip.
PYTHON ?= python3
GO     ?= go
CXX    ?= g++
CC     ?= gcc
export CGO_ENABLED := 1
export PIP_ROOT_USER_ACTION := ignore
export PIP_DISABLE_PIP_VERSION_CHECK := 1

LIB := build/libtirastore.so

.PHONY: all build build-failpoints install test test-go test-python test-c lint header demo bench fusebed torture clean

all: build

# The shared library (build/ and python/tirastore/) via build.sh.
build:
	./build.sh

# The Python package in editable mode, with its test dependencies; the
# build backend compiles the Go library (python/hatch_build.py).
install:
	$(PYTHON) -m pip install -q -e ".[dev]"

lint:
	@out="$$(gofmt -l capi core tests 2>/dev/null)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run ./capi/genheader -check

test-go:
	$(GO) test -race -count=1 ./...
	$(GO) test -race -count=1 -tags failpoints ./core/failpoint/

test-c: build
	$(CC) -std=c11 -Wall -Wextra -Werror -Iinclude tests/c/test_capi.c -Lbuild -ltirastore -Wl,-rpath,$(CURDIR)/build -o build/test_capi
	./build/test_capi
	$(CXX) -std=c++17 -Wall -Wextra -Werror -Iinclude examples/harness.cpp -Lbuild -ltirastore -Wl,-rpath,$(CURDIR)/build -o build/harness
	./build/harness build/harness-test.db
	$(CC) -std=c11 -Wall -Wextra -Werror -Iinclude tests/c/test_fork.c -Lbuild -ltirastore -Wl,-rpath,$(CURDIR)/build -o build/test_fork
	./build/test_fork
	CC="$(CC)" CXX="$(CXX)" tests/c/readme_snippet.sh

# The test variant of the library with failpoints compiled in (crash tests).
build-failpoints:
	./build.sh failpoints

test-python: install build-failpoints
	$(PYTHON) -m pytest -q -rs tests/python
	$(PYTHON) -m pytest -q --doctest-modules python/tirastore

# Everything CI runs (.ci/run calls exactly this).
test: lint test-go test-c test-python

# The main job: an autoscheduler-like workload on ./tirastore-demo/cache.db.
demo: install
	$(PYTHON) examples/demo.py --db tirastore-demo/cache.db

# Issue 5's benchmark: the engine from Go, Python and ctypes against the
# original's per-operation protocol (tests/bench/baseline), same run, same
# disk: a table on stdout and build/bench/results.{json,txt}. Python rows use
# this tree's package and library (PYTHONPATH/TIRASTORE_LIB set by the tool);
# only cffi must be importable, so `make install` runs only when it is not.
# BENCHFLAGS: e.g. -quick, -dir /lustre/scratch/me/bench, -procs 1,8,64.
BENCHFLAGS ?=
bench: build
	@$(PYTHON) -c 'import cffi' 2>/dev/null || $(MAKE) install
	$(GO) build -o build/bench/tirastore-bench ./tests/bench
	./build/bench/tirastore-bench -python $(PYTHON) $(BENCHFLAGS)

# The Lustre-like FUSE test bed (tests/fusebed/main.go documents it).
fusebed: ; go build -o build/fusebed ./tests/fusebed

# The local torture run of the lock on the FUSE bed (tests/multinode/torture.py):
# 8 simulated nodes x 8 workers on one database, SIGKILLs inside and outside
# the lock, restarts, exact verification; then the negative control (the lock
# switched off, smaller), which must fail verification.
torture: build build-failpoints fusebed
	$(PYTHON) tests/multinode/torture.py
	$(PYTHON) tests/multinode/torture.py --no-lock --expect-failure --nodes 4 --per-node 4 --nrecords 8 --ncontested 6 --kills 5

clean:
	rm -rf build dist python/tirastore/libtirastore.so tirastore-demo .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
