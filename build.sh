#!/usr/bin/env bash
# Build libtirastore.so (the Go engine behind the C ABI of include/tirastore.h)
# into build/ and next to the Python package. Needs Go >= 1.22 and a C compiler.
#
#   ./build.sh              the library (build/ and python/tirastore/)
#   ./build.sh failpoints   the test variant that honours TIRASTORE_FAILPOINTS,
#                           into build/failpoints/ (see core/failpoint)
set -euo pipefail
cd "$(dirname "$0")"
export CGO_ENABLED=1
if [ "${1:-}" = failpoints ]; then
    mkdir -p build/failpoints
    go build -trimpath -tags failpoints -buildmode=c-shared -o build/failpoints/libtirastore.so ./capi
    rm -f build/failpoints/libtirastore.h
    exit 0
fi
mkdir -p build
# -s -w: no symbol table, no DWARF. The library ships in every wheel and
# every install; Go's own tracebacks need neither (they use the pclntab),
# and the debug info is a large part of its size. The failpoints build
# above keeps them: it exists to be debugged.
go build -trimpath -ldflags "-s -w" -buildmode=c-shared -o build/libtirastore.so ./capi
rm -f build/libtirastore.h   # cgo's own header; include/tirastore.h is the contract
cp build/libtirastore.so python/tirastore/libtirastore.so.tmp
mv -f python/tirastore/libtirastore.so.tmp python/tirastore/libtirastore.so
