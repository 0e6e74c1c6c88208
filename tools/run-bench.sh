#!/usr/bin/env bash
# Runs the benchmark programs given (make bench passes every tests/bench/*.c
# binary) one after another and prints their tables; loadgen is the soak's load
# generator (make soak) and is left out. Each program's output is also kept as
# $BUILD/bench/NAME.md, and its tables as data beside it (NAME.json, NAME-N.csv:
# tools/bench-tables.py); tools/bench-plot.py draws them. Figures go into
# docs/benchmarks.md with the machine and the date. Exits non-zero when a
# benchmark fails. The GPU ones skip (exit 0, "skipped") on a machine without one.
set -u
set -o pipefail
out="${BUILD:-build}/bench"
mkdir -p "$out"
status=0
for bin in "$@"; do
    name=$(basename "$bin")
    case "$name" in
    loadgen) continue ;;
    esac
    echo "==> $name"
    if ! "$bin" | tee "$out/$name.md"; then
        echo "FAILED: $name"
        status=1
    fi
    python3 "$(dirname "$0")/bench-tables.py" "$out/$name.md" "$out" || status=1
done
exit $status
