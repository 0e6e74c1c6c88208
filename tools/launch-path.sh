#!/usr/bin/env bash
# Counts the calls between the daemon's files on the path of a launch served on
# the loop (docs/architecture.md, "The path of a launch"): builds tesserad with
# -finstrument-functions into $TRACE_BUILD (default build/trace; the daemon's
# own files instrumented, nothing else), starts it on the cpu backend under
# dataplane_bench's latency section (tiny launches on one connection), records
# every call below the transport's hand-over of a request (server_received) and
# prints, per launch served on the loop, how many calls went from one .c file
# of the daemon into another, with the last launch's calls listed.
#
#   tools/launch-path.sh [ITERS] [BACKEND]   (needs the normal build: make, and its bench)
#
# BACKEND is cpu (default) or cpu-isolated: there the device worker's calls for
# the last launch (its worker_serve windows) are listed too.
set -euo pipefail
cd "$(dirname "$0")/.."
iters=${1:-50}
backend=${2:-cpu}
trace_build=${TRACE_BUILD:-build/trace}
build=${BUILD:-build}
mkdir -p "$trace_build"
cc -c -O2 -fPIC -Wall -Wextra -Werror tools/launch-path/call_trace.c -o "$trace_build/call_trace.o"
CFLAGS="-O2 -g -finstrument-functions -finstrument-functions-exclude-file-list=lib/,client/,gen/,/usr/" \
    make -s BUILD="$trace_build" LDFLAGS="$trace_build/call_trace.o" "$trace_build/bin/tesserad"
make -s "$build/tests/bench/dataplane_bench"
symbol() { nm "$trace_build/bin/tesserad" | awk -v s="$1" '$3 == s { print $1 }'; }
loop_root=$(symbol server_received)
worker_root=$(symbol worker_serve)
[ -n "$loop_root" ] && [ -n "$worker_root" ] ||
    { echo "launch-path: no server_received or worker_serve in $trace_build/bin/tesserad" >&2; exit 1; }
trace=$(mktemp)
trap 'rm -f "$trace"' EXIT
TSRD_CALL_TRACE="$trace" TSRD_CALL_TRACE_ROOT="$loop_root,$worker_root" \
    "$build/tests/bench/dataplane_bench" --daemon "$trace_build/bin/tesserad" --backend "$backend" \
    --iters "$iters" --only latency >/dev/null
python3 tools/launch-path/count.py "$trace_build/bin/tesserad" "$trace"
