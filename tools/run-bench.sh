#!/usr/bin/env bash
# Runs the benchmark programs given (make bench passes every tests/bench/*.c
# binary) one after another and prints their tables; loadgen is the soak's load
# generator (make soak) and is left out. Figures go into docs/benchmarks.md by
# hand, with the machine and the date. Exits non-zero when a benchmark fails.
# The GPU ones skip (exit 0, "skipped") on a machine without one.
set -u
status=0
for bin in "$@"; do
    name=$(basename "$bin")
    case "$name" in
    loadgen) continue ;;
    esac
    echo "==> $name"
    if ! "$bin"; then
        echo "FAILED: $name"
        status=1
    fi
done
exit $status
