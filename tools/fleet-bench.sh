#!/usr/bin/env bash
# The fleet cache's cold start (docs/benchmarks.md): the time a new node takes
# to serve N distinct regions (default 100) when another node has already built
# them into Redis, against compiling them itself. Starts its own redis-server
# on a free local port and, per round, three daemons, each with a fresh disk
# cache:
#   compile  no fleet cache: every region compiled here (the baseline)
#   first    fleet cache on: compiles and publishes (warms Redis)
#   second   fleet cache on: the cold node of a warmed fleet
# The N regions are pointwise chains of three unary ops, each chain its own:
# a distinct kernel variant on every backend (a CUDA pointwise kernel serves
# every shape of its ops, so shapes alone would make one build). Each node is
# sent, per region, `tessera-cli run` (compile, then one launch on a 256x256
# input; --mode warm: one `tessera-cli cache warm` of all N, compiles only),
# timed as a whole from the first request to the last answer; its start (to
# the first answered ping) is timed apart. kcache_builds_total,
# fleet_cache_hits_total and the mean fleet lookup (fleet_cache_lookup_seconds:
# Redis round trips and checks) are read after.
#
#   tools/fleet-bench.sh [--backend cpu|cuda|...] [--mode run|warm] [N] [ROUNDS]
#
# Environment: BUILD, the folder holding bin/tesserad and bin/tessera-cli
# (default build; a GPU bundle's lib/ joins LD_LIBRARY_PATH when present);
# REDIS_SERVER, the redis-server to start (default: the one on the PATH; no
# redis-cli is needed); OUT, when set, a folder that receives the results as
# fleet-bench-BACKEND.md (the Markdown table) and fleet-bench-BACKEND.tsv, and
# the daemons' logs when a node fails. The table is printed as well. Every
# daemon and the redis-server are killed on exit, however it comes.
set -euo pipefail
backend=cpu
mode=run
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --backend) backend=${2:?--backend takes a name}; shift 2 ;;
        --backend=*) backend=${1#--backend=}; shift ;;
        --mode) mode=${2:?--mode takes run or warm}; shift 2 ;;
        --mode=*) mode=${1#--mode=}; shift ;;
        -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "fleet-bench: unknown option '$1'" >&2; exit 2 ;;
        *) args+=("$1"); shift ;;
    esac
done
n=${args[0]:-100}
rounds=${args[1]:-3}
case "$mode" in run|warm) ;; *) echo "fleet-bench: --mode is run or warm, not '$mode'" >&2; exit 2 ;; esac
[ "$n" -ge 1 ] && [ "$n" -le 512 ] || { echo "fleet-bench: N is 1 to 512 (distinct op chains)" >&2; exit 2; }
build=${BUILD:-build}
daemon="$build/bin/tesserad"
cli="$build/bin/tessera-cli"
redis_server=${REDIS_SERVER:-redis-server}
[ -d "$build/lib" ] && export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
command -v "$redis_server" >/dev/null ||
    { echo "fleet-bench: no redis-server ('$redis_server'; set REDIS_SERVER)" >&2; exit 1; }
[ -x "$daemon" ] && [ -x "$cli" ] || { echo "fleet-bench: no $daemon or $cli (build first, or set BUILD)" >&2; exit 1; }
out=${OUT:-}
[ -z "$out" ] || mkdir -p "$out"
# The CLI's per-request deadline: a cold CUDA compile with its verification
# can take seconds.
cli_opts=(--timeout 600000)

work=$(mktemp -d /tmp/tsr-fleet-bench-XXXXXX)
pids=()
redis_pid=
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for f in "$work"/*/pid; do [ -f "$f" ] && pids+=("$(cat "$f")"); done
    for p in "${pids[@]}" $redis_pid; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}" $redis_pid; do
        for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A port nothing listens on: the kernel's pick for port 0 when python3 is
# there, else a random one that refuses a connection.
free_port() {
    if command -v python3 >/dev/null; then
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
        return
    fi
    local p
    while :; do
        p=$((20000 + RANDOM % 40000))
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
    done
}

# redis_cmd WORD...: one inline command to the bench's Redis; its first reply line.
redis_cmd() {
    local line
    exec 3<>"/dev/tcp/127.0.0.1/$port" || return 1
    printf '%s\r\n' "$*" >&3
    IFS= read -r -t 5 line <&3 || line=
    exec 3<&- 3>&-
    printf '%s\n' "${line%$'\r'}"
}

# fail NODE WHAT: says so, keeps the logs in $OUT, and exits.
fail() {
    echo "fleet-bench: $1: $2" >&2
    if [ -n "$out" ]; then
        for f in "$work"/*/log "$work/redis.log"; do
            [ -f "$f" ] && { echo "==== $f"; tail -n 200 "$f"; }
        done > "$out/fleet-bench-$backend-logs.txt" 2>/dev/null || true
    fi
    exit 1
}

# N pointwise regions y = op3(op2(op1(x))), the chain i's digits in base 8 over
# ops that are finite everywhere: N distinct kernel variants.
ops=(relu gelu silu sigmoid tanh neg abs softplus)
mkdir -p "$work/regions"
for i in $(seq 0 $((n - 1))); do
    a=${ops[$((i % 8))]} b=${ops[$((i / 8 % 8))]} c=${ops[$((i / 64 % 8))]}
    printf '{"kind": "pointwise", "dtype": "f32", "inputs": [{"name": "x", "shape": [256, 256]}], "ops": [{"op": "%s", "args": ["x"], "out": "t1"}, {"op": "%s", "args": ["t1"], "out": "t2"}, {"op": "%s", "args": ["t2"], "out": "y"}], "output": "y"}\n' \
        "$a" "$b" "$c" > "$work/regions/r$(printf %03d "$i").json"
done
# x: a 256x256 float32 .npy of 0.5 (3f000000), header padded to 64 bytes.
{
    header="{'descr': '<f4', 'fortran_order': False, 'shape': (256, 256), }"
    pad=$(((64 - (10 + ${#header} + 1) % 64) % 64))
    hlen=$((${#header} + pad + 1))
    printf '\x93NUMPY\x01\x00'
    printf "\\x$(printf %02x $((hlen % 256)))\\x$(printf %02x $((hlen / 256)))"
    printf '%s%*s\n' "$header" "$pad" ''
    printf '\x00\x00\x00\x3f' > "$work/x4"
    for _ in $(seq 1 16); do cat "$work/x4" "$work/x4" > "$work/x8"; mv "$work/x8" "$work/x4"; done
    cat "$work/x4"
} > "$work/x.npy"

head -c 32 /dev/urandom > "$work/fleet.key"
chmod 600 "$work/fleet.key"
port=$(free_port)
"$redis_server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
    >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 200); do
    [ "$(redis_cmd PING 2>/dev/null)" = "+PONG" ] && break
    kill -0 "$redis_pid" 2>/dev/null || fail redis "redis-server exited (see redis.log)"
    sleep 0.05
done
[ "$(redis_cmd PING 2>/dev/null)" = "+PONG" ] || fail redis "redis-server on port $port did not answer"

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# start NAME [fleet]: a daemon in $work/NAME with a fresh cache; up is the
# seconds it took to answer a ping. (Not in a subshell: pids must stay.)
start() {
    local dir="$work/$1" t0
    rm -rf "$dir"
    mkdir -p "$dir"
    if [ "${2:-}" = fleet ]; then
        printf '{"fleet_cache": {"url": "redis://127.0.0.1:%d", "key_file": "%s"}}\n' \
            "$port" "$work/fleet.key" > "$dir/conf.json"
    else
        echo '{}' > "$dir/conf.json"
    fi
    t0=$(now)
    "$daemon" --config "$dir/conf.json" --listen "ipc://$dir/sock" --cache-dir "$dir/cache" \
        --backend "$backend" --log-level warn >"$dir/log" 2>&1 &
    pids+=($!)
    echo $! > "$dir/pid"
    # A CUDA backend's start (driver, context, NVRTC) takes seconds.
    for _ in $(seq 1 1200); do
        if "$cli" --url "ipc://$dir/sock" ping >/dev/null 2>&1; then
            up=$(secs "$t0" "$(now)")
            return 0
        fi
        kill -0 "$(cat "$dir/pid")" 2>/dev/null || fail "$1" "tesserad exited (see its log)"
        sleep 0.05
    done
    fail "$1" "tesserad did not answer within 60 s"
}

stop() {
    local pid
    pid=$(cat "$work/$1/pid")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

counter() {
    "$cli" --url "ipc://$work/$1/sock" stats | awk -v k="$2" '$1 == k {print $2}'
}

# serve NAME: seconds to serve the N regions.
serve() {
    local url="ipc://$work/$1/sock" t0 f
    t0=$(now)
    if [ "$mode" = warm ]; then
        "$cli" --url "$url" "${cli_opts[@]}" cache warm "$work"/regions/*.json >/dev/null \
            2>"$work/$1/cli.err" || fail "$1" "cache warm: $(head -c 300 "$work/$1/cli.err")"
    else
        for f in "$work"/regions/*.json; do
            "$cli" --url "$url" "${cli_opts[@]}" run "$f" -i "x=$work/x.npy" -o "$work/$1/y.npy" \
                >/dev/null 2>"$work/$1/cli.err" ||
                fail "$1" "run $(basename "$f"): $(head -c 300 "$work/$1/cli.err")"
        done
    fi
    secs "$t0" "$(now)"
}

what="compile + one launch each (tessera-cli run)"
[ "$mode" = warm ] && what="compile only (tessera-cli cache warm)"
md=$work/table.md
tsv=$work/table.tsv
{
    echo "Fleet cache cold start, $backend backend, $n regions, $what"
    echo
    echo "| round | node | regions | start (s) | wall (s) | per region (ms) | builds | fleet hits | mean fleet lookup (ms) |"
    echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
} > "$md"
printf 'backend\tmode\tround\tnode\tregions\tstart_s\twall_s\tper_region_ms\tbuilds\tfleet_hits\tmean_fleet_lookup_ms\n' > "$tsv"
cat "$md"
for r in $(seq 1 "$rounds"); do
    [ "$(redis_cmd FLUSHALL)" = "+OK" ] || fail redis "FLUSHALL was not answered OK"
    for node in compile first second; do
        if [ "$node" = compile ]; then start "$node"; else start "$node" fleet; fi
        s=$(serve "$node")
        builds=$(counter "$node" kcache_builds_total)
        hits=$(counter "$node" fleet_cache_hits_total)
        per=$(awk -v s="$s" -v n="$n" 'BEGIN { printf "%.2f", s * 1000 / n }')
        lookup=-
        if [ "$node" != compile ]; then
            sum=$(counter "$node" fleet_cache_lookup_seconds_sum)
            cnt=$(counter "$node" fleet_cache_lookup_seconds_count)
            lookup=$(awk -v s="${sum:-0}" -v c="${cnt:-0}" 'BEGIN { if (c > 0) printf "%.3f", s * 1000 / c; else print "-" }')
        fi
        # Distinct regions must be distinct builds, or the comparison is void.
        if [ "$node" != second ] && [ "${builds:-0}" -lt "$n" ] 2>/dev/null; then
            echo "fleet-bench: warning: $node built ${builds:-0} kernels for $n regions" >&2
        fi
        line="| $r | $node | $n | $up | $s | $per | ${builds:-0} | ${hits:-0} | $lookup |"
        echo "$line" | tee -a "$md"
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$backend" "$mode" "$r" "$node" "$n" \
            "$up" "$s" "$per" "${builds:-0}" "${hits:-0}" "$lookup" >> "$tsv"
        stop "$node"
    done
done
if [ -n "$out" ]; then
    cp "$md" "$out/fleet-bench-$backend.md"
    cp "$tsv" "$out/fleet-bench-$backend.tsv"
fi
