#!/usr/bin/env bash
# The soak with Foundation's per-request leak patched out (see curlu-leak-fix.c), to measure what the library
# itself keeps. Usage: scripts/soak-without-foundation-leak.sh [N] [--server-process]
set -euo pipefail
cd "$(dirname "$0")/.."
swift build -c release --product requests-bench >&2
clang -O2 -shared -fPIC -o .build/libcurlu-leak-fix.so scripts/curlu-leak-fix.c -ldl -lpthread
LD_PRELOAD="$PWD/.build/libcurlu-leak-fix.so" .build/release/requests-bench --soak "${1:-100000}" "${@:2}"
