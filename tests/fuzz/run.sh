#!/usr/bin/env bash
# Runs each libFuzzer target for a set time: tests/fuzz/run.sh SECONDS FUZZ_BUILD TARGET...
#
# Each target starts from its committed seed corpus (tests/fuzz/corpus/<target>/,
# read only) and writes what it discovers into FUZZ_BUILD/corpus/<target>/, so a
# run never rewrites committed files. A crash, a sanitizer report, a leak, a
# timeout (over 25 s for one input) or an input needing more than 2 GiB stops the
# target; the reproducer lands in FUZZ_BUILD/artifacts/<target>/ and the script
# exits non-zero after the other targets ran. The last lines of each log (the
# execution count among them) are printed; full logs stay in FUZZ_BUILD/logs/.
set -uo pipefail
cd "$(dirname "$0")/../.."
seconds=$1
build=$2
shift 2
failed=()
for t in "$@"; do
    work="$build/corpus/$t"
    art="$build/artifacts/$t"
    log="$build/logs/$t.log"
    mkdir -p "$work" "$art" "$build/logs"
    echo "==> fuzz $t for ${seconds}s"
    dict=()
    [ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
    if "$build/fuzz_$t" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$art/" "${dict[@]}" \
        "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
        grep -E '^stat::number_of_executed_units|^Done [0-9]+ runs' "$log" | tail -2
    else
        echo "FAILED: $t (see $log and $art/)"
        tail -40 "$log"
        failed+=("$t")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz targets that failed: ${failed[*]}"
    exit 1
fi
