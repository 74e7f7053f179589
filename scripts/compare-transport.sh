#!/usr/bin/env bash
# Throughput and CPU per request of two requests-bench builds against raw URLSession, run alternately in one
# session so that both meet the same machine: BEFORE and AFTER are release binaries of requests-bench (for
# example the commit before a transport change, built in a git worktree, and this one).
#
#   scripts/compare-transport.sh BEFORE_BINARY AFTER_BINARY [PAIRS] [extra requests-bench arguments]
#
# Each pair runs `--only throughput` once with each binary (each run has its own raw baseline, measured in
# alternation with the library); the summary gives, per concurrency, the median over pairs of each build's
# library ÷ raw ratio and extra CPU per request.
set -euo pipefail
before=$1
after=$2
pairs=${3:-3}
shift 3 || shift $#
extra=("$@")
out=$(mktemp -d)
for pair in $(seq 1 "$pairs"); do
    for side in before after; do
        binary=$before
        [ "$side" = after ] && binary=$after
        echo "== pair $pair: $side ($binary)" >&2
        "$binary" --only throughput "${extra[@]}" > "$out/$side-$pair.txt" 2>/dev/null || true
    done
done
for side in before after; do
    echo "$side:"
    cat "$out"/$side-*.txt | awk -F'|' '
        /^Concurrency/ && /ratio/ { split($4, r, " "); ratio[$1] = ratio[$1] " " r[2] }
        /^Concurrency/ && /µs more/ { gsub(/ /, "", $4); cpu[$1] = cpu[$1] " " $4 }
        END { for (c in ratio) printf "  %s ratios:%s | extra CPU/request:%s\n", c, ratio[c], cpu[c] }' | sort -V
done
rm -rf "$out"
