#!/usr/bin/env bash
# Load and soak: starts a real tesserad, drives it with tests/bench/loadgen and
# checks that every request was answered correctly, that the daemon's memory
# stayed flat and that it shuts down cleanly.
#
#   tools/soak.sh [SECONDS] [CLIENTS]        (make soak: SOAK_SECONDS=600 SOAK_CLIENTS=32)
#
# Environment: BUILD (default build) names the build with bin/tesserad and
# tests/bench/loadgen; TESSERAD overrides the daemon binary (for instance the
# AddressSanitizer build, build/asan/bin/tesserad, whose leak check then runs at
# exit: any leak makes the exit status non-zero and fails the soak);
# SOAK_RSS_SLACK_MB (default 16) is the growth allowed after warm-up;
# SOAK_BACKEND (default cpu) picks the daemon's backend (cpu-isolated runs the
# device side in a worker process; its memory is not in the RSS figure);
# SOAK_LOG names a file that receives the summary as well; SOAK_LOADGEN_ARGS
# adds loadgen options (--mix, --reconnect-every, --seed). Without
# --reconnect-every each client keeps one connection for the whole run, as a
# framework does, and frees the kernels it compiles (kernel_free).
#
# The daemon runs the CPU backend with a small kernel cache (8 MiB in memory,
# 64 MiB on disk) so that the compile misses in the mix reach the bounds within
# minutes and evictions are part of the run. Exit status 0 on a pass.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
clients=${2:-32}
build=${BUILD:-build}
tesserad=${TESSERAD:-$build/bin/tesserad}
loadgen=$build/tests/bench/loadgen
slack=${SOAK_RSS_SLACK_MB:-16}

dir=$(mktemp -d /tmp/tsr-soak-XXXXXX)
pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT

cat >"$dir/tesserad.json" <<CONF
{
  "listen": ["ipc://$dir/sock"],
  "cache_dir": "$dir/cache",
  "backend": "${SOAK_BACKEND:-cpu}",
  "log_level": "warn",
  "cache_memory_bytes": 8388608,
  "cache_disk_bytes": 67108864
}
CONF

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:exitcode=86}
"$tesserad" --config "$dir/tesserad.json" 2>"$dir/tesserad.log" &
pid=$!
for _ in $(seq 100); do
    [ -S "$dir/sock" ] && break
    sleep 0.1
done
if ! kill -0 "$pid" 2>/dev/null; then
    echo "soak: tesserad did not start"; cat "$dir/tesserad.log"; exit 1
fi

echo "==> soak: $clients clients for ${seconds}s against $tesserad (pid $pid)"
set +e
"$loadgen" --url "ipc://$dir/sock" --clients "$clients" --seconds "$seconds" --pid "$pid" \
    --rss-slack-mb "$slack" ${SOAK_LOADGEN_ARGS:-} | tee "$dir/summary"
lg=${PIPESTATUS[0]}
kill -TERM "$pid" 2>/dev/null
wait "$pid"
rc=$?
set -e
pid=
echo "daemon_exit $rc" | tee -a "$dir/summary"
if [ -s "$dir/tesserad.log" ]; then
    echo "--- tesserad log (last 20 lines) ---"
    tail -20 "$dir/tesserad.log"
fi
[ -n "${SOAK_LOG:-}" ] && cp "$dir/summary" "$SOAK_LOG"
if [ "$lg" -ne 0 ] || [ "$rc" -ne 0 ]; then
    echo "soak: FAILED (loadgen $lg, tesserad exit $rc)"
    exit 1
fi
echo "soak: passed"
