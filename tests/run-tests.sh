#!/usr/bin/env bash
# Runs Criterion test binaries one after another and prints one closing line with
# the totals, "tests: N passed, N failed". Exits non-zero when any suite fails or
# crashes. Criterion's own per-suite synthesis lines are kept in the output.
set -u
passed=0
failed=0
status=0
for bin in "$@"; do
    name=${bin#"${BUILD:-build}"/}
    echo "==> $name"
    out=$("$bin" --jobs 2 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -v '^\[----\].*Skipped' | tail -n 40
    line=$(printf '%s\n' "$out" | grep 'Synthesis:' | tail -n 1)
    t=$(sed -n 's/.*Passing: *\([0-9]*\).*/\1/p' <<<"$line")
    f=$(sed -n 's/.*Failing: *\([0-9]*\).*/\1/p' <<<"$line")
    c=$(sed -n 's/.*Crashing: *\([0-9]*\).*/\1/p' <<<"$line")
    passed=$((passed + ${t:-0}))
    failed=$((failed + ${f:-0} + ${c:-0}))
    if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
        echo "FAILED: $name (exit $rc)"
        status=1
        [ -z "$line" ] && failed=$((failed + 1))
    fi
done
echo "tests: $passed passed, $failed failed"
exit $status
