#!/usr/bin/env bash
# The fleet cache's cold start (docs/benchmarks.md): the time a new node takes
# to serve N distinct regions (default 100) when another node has already built
# them into Redis, against compiling them itself. Starts its own redis-server
# on a free local port and, per round, three daemons on the CPU backend, each
# with a fresh disk cache:
#   compile  no fleet cache: every region compiled here (the baseline)
#   first    fleet cache on: compiles and publishes (warms Redis)
#   second   fleet cache on: the cold node of a warmed fleet
# Each node is sent `tessera-cli cache warm` of the N regions (one process,
# one connection, one compile after another), timed as a whole; its
# kcache_builds_total, fleet_cache_hits_total and the mean fleet lookup
# (fleet_cache_lookup_seconds, Redis round trips and checks) are read after.
# Prints one Markdown table. Usage: tools/fleet-bench.sh [N] [ROUNDS]. Needs redis-server.
set -euo pipefail
n=${1:-100}
rounds=${2:-3}
build=${BUILD:-build}
daemon="$build/bin/tesserad"
cli="$build/bin/tessera-cli"
command -v redis-server >/dev/null || { echo "fleet-bench: redis-server is not installed" >&2; exit 1; }
[ -x "$daemon" ] && [ -x "$cli" ] || { echo "fleet-bench: build first (make)" >&2; exit 1; }

work=$(mktemp -d /tmp/tsr-fleet-bench-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# N pointwise regions of distinct shapes: one kernel each (pointwise kernels
# are built per shape).
mkdir -p "$work/regions"
for i in $(seq 1 "$n"); do
    printf '{"kind": "pointwise", "dtype": "f32", "inputs": [{"name": "a", "shape": [%d]}, {"name": "b", "shape": [%d]}], "ops": [{"op": "add", "args": ["a", "b"], "out": "s"}, {"op": "gelu", "args": ["s"], "out": "y"}], "output": "y"}\n' \
        "$((i + 7))" "$((i + 7))" > "$work/regions/r$(printf %03d "$i").json"
done
head -c 32 /dev/urandom > "$work/fleet.key"
chmod 600 "$work/fleet.key"
port=$(free_port)
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
    >"$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.05
done

# start NAME [fleet]: a daemon in $work/NAME with a fresh cache.
start() {
    local dir="$work/$1"
    rm -rf "$dir"
    mkdir -p "$dir"
    if [ "${2:-}" = fleet ]; then
        printf '{"fleet_cache": {"url": "redis://127.0.0.1:%d", "key_file": "%s"}}\n' \
            "$port" "$work/fleet.key" > "$dir/conf.json"
    else
        echo '{}' > "$dir/conf.json"
    fi
    "$daemon" --config "$dir/conf.json" --listen "ipc://$dir/sock" --cache-dir "$dir/cache" \
        --backend cpu --log-level warn >"$dir/log" 2>&1 &
    pids+=($!)
    echo $! > "$dir/pid"
    for _ in $(seq 1 200); do
        "$cli" --url "ipc://$dir/sock" ping >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "fleet-bench: $1 did not start" >&2
    exit 1
}

stop() {
    kill "$(cat "$work/$1/pid")"
    wait "$(cat "$work/$1/pid")" 2>/dev/null || true
}

counter() {
    "$cli" --url "ipc://$work/$1/sock" stats | awk -v k="$2" '$1 == k {print $2}'
}

# warm NAME: seconds to serve the N regions.
warm() {
    local t0 t1
    t0=$(date +%s.%N)
    "$cli" --url "ipc://$work/$1/sock" cache warm "$work"/regions/*.json >/dev/null
    t1=$(date +%s.%N)
    python3 -c "print(f'{$t1 - $t0:.3f}')"
}

echo "| round | node | regions | wall (s) | per region (ms) | builds | fleet hits | mean fleet lookup (ms) |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for r in $(seq 1 "$rounds"); do
    redis-cli -p "$port" flushall >/dev/null
    for node in compile first second; do
        if [ "$node" = compile ]; then start "$node"; else start "$node" fleet; fi
        s=$(warm "$node")
        builds=$(counter "$node" kcache_builds_total)
        hits=$(counter "$node" fleet_cache_hits_total)
        per=$(python3 -c "print(f'{$s * 1000 / $n:.2f}')")
        lookup=-
        if [ "$node" != compile ]; then
            sum=$(counter "$node" fleet_cache_lookup_seconds_sum)
            cnt=$(counter "$node" fleet_cache_lookup_seconds_count)
            lookup=$(python3 -c "print(f'{$sum * 1000 / $cnt:.3f}')")
        fi
        echo "| $r | $node | $n | $s | $per | $builds | ${hits:-0} | $lookup |"
        stop "$node"
    done
done
