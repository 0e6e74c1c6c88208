#!/usr/bin/env bash
# cold-compile.sh — how long a compile takes at the shapes a framework sends:
# every region in tests/bench/shapes/ compiled through a fresh tesserad with an
# empty kernel cache (cold: code generation, NVRTC, verification), then again
# (warm), with the arbiter's pick and how it was verified, as a markdown table.
#
#   tools/cold-compile.sh [BACKEND]      (default cuda; BUILD or GPU_BUNDLE names the binaries)
#
# Each figure is the wall time of one `tessera-cli --json compile` as a client
# sees it, connection included.
set -euo pipefail
cd "$(dirname "$0")/.."
root=${GPU_BUNDLE:-${BUILD:-build}}
bin=$root/bin
# A device bundle carries the libraries its programs need.
[ -d "$root/lib" ] && export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
backend=${1:-cuda}
dir=$(mktemp -d /tmp/tesserad-cold.XXXXXX)
url="ipc://$dir/sock"
"$bin/tesserad" --backend "$backend" --listen "$url" --cache-dir "$dir/cache" --log-level warn \
    2>"$dir/tesserad.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 200); do [ -S "$dir/sock" ] && break; sleep 0.05; done

now_ms() { date +%s%N | awk '{printf "%.1f", $1 / 1e6}'; }
echo "### Cold and warm compiles, $backend backend"
echo
echo "| region | cold ms | warm ms | candidate (tier) | verified | verification | reason |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for f in tests/bench/shapes/*.json; do
    name=$(basename "$f" .json)
    t0=$(now_ms)
    if "$bin/tessera-cli" --url "$url" --timeout 600000 --json compile "$f" >"$dir/cold.json" 2>"$dir/err"; then
        t1=$(now_ms)
        "$bin/tessera-cli" --url "$url" --timeout 600000 --json compile "$f" >"$dir/warm.json"
        t2=$(now_ms)
        python3 - "$dir/cold.json" "$name" "$t0" "$t1" "$t2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["decision"]
v = d.get("verdict", {})
how = v.get("method", "") or ("not run" if not d.get("verified") else "full")
extra = ""
if v.get("sampled_elements"):
    extra = f", {v['sampled_elements']} sampled"
if v.get("small_probes"):
    extra += f", {v['small_probes']} small-shape probes"
t0, t1, t2 = map(float, sys.argv[3:6])
print(f"| {sys.argv[2]} | {t1 - t0:.0f} | {t2 - t1:.1f} | {d['candidate']} ({d['tier']}) | "
      f"{'yes' if d.get('verified') else 'no'} | {how}{extra} | {d.get('reason', '')} |")
PY
    else
        t1=$(now_ms)
        msg=$(tr '\n' ' ' <"$dir/err" | cut -c1-160)
        echo "| $name | $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.0f", b - a}') | | refused | | | $msg |"
    fi
done
