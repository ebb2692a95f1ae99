#!/usr/bin/env bash
# The C example of README.md ("### C and C++", its first ```c block) must
# stay a complete program: extract it, build it as C11 and as C++17 with
# warnings as errors against include/ and build/libtirastore.so, run both
# on a new database, and check what they print. Called by `make test-c`
# (after `make build`); CC and CXX as in the Makefile.
set -euo pipefail
cd "$(dirname "$0")/../.."
CC=${CC:-gcc}
CXX=${CXX:-g++}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

awk '
    /^### C and C\+\+/         { section = 1; next }
    section && !inside && /^#/ { exit }
    section && /^```c$/        { inside = 1; next }
    inside && /^```$/          { exit }
    inside                     { print }
' README.md >"$work/readme.c"
if ! grep -q 'int main' "$work/readme.c"; then
    echo "readme_snippet: no C program found under '### C and C++' in README.md" >&2
    exit 1
fi

fail() { echo "readme_snippet: README.md's C example (### C and C++) $*" >&2; exit 1; }
"$CC" -std=c11 -Wall -Wextra -Werror -Iinclude "$work/readme.c" -Lbuild -ltirastore -o "$work/readme_c" ||
    fail "does not build as C11"
"$CXX" -std=c++17 -Wall -Wextra -Werror -x c++ -Iinclude "$work/readme.c" -x none -Lbuild -ltirastore -o "$work/readme_cxx" ||
    fail "does not build as C++17"

for bin in readme_c readme_cxx; do
    out=$(cd "$work" && LD_LIBRARY_PATH="$OLDPWD/build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "./$bin" "$bin.db") ||
        fail "fails when run ($bin)"
    case "$out" in
    '{"result":{"is_legal":true,"execution_times":[0.5],'*) ;;
    *) fail "printed an unexpected lookup result ($bin): $out" ;;
    esac
done
echo "readme_snippet: README.md's C example builds (C11, C++17) and runs"
