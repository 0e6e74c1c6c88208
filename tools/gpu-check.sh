#!/usr/bin/env bash
# gpu-check.sh — the CUDA backend's check on a GPU machine, from a device bundle.
#
# Build the bundle on a development machine (no GPU needed):
#   make -j2 all build/tests/gpu/cuda_backend_test build/tests/bench/gpu_bench
#   ../shared/tools/device-bundle build/gpu build/bin/tesserad build/bin/tessera-cli \
#       build/tests/gpu/*_test build/tests/bench/gpu_bench
# then, in the repository root on the GPU machine:
#   tools/gpu-check.sh                 (logs under $OUT, or a fresh /tmp directory)
#
# It runs, each step logged separately and none stopping the others:
#   1. every tests/gpu suite in the bundle (Criterion; they start their own tesserad
#      with --backend cuda);
#   2. every examples/*.json through `tessera-cli run` against a GPU-backed tesserad,
#      in f32, f16 and bf16, compared with the same run on a CPU-backed tesserad
#      (the reference executor) by relative L2 error within the dtype's bound and
#      NaN/inf positions;
#   3. gpu_bench (compile latency, pointwise GB/s, tier-3 GEMM TFLOP/s);
#   4. python3 tests/bench/torch_baselines.py (torch on the same card);
# and prints a summary table last. Exit status: 0 when steps 1 and 2 pass.
# GPU_CHECK_STEPS (default "tests examples bench torch") picks the steps to run.
set -uo pipefail
cd "$(dirname "$0")/.."

bundle=${GPU_BUNDLE:-build/gpu}
out=${OUT:-$(mktemp -d /tmp/gpu-check.XXXXXX)}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The tests start "$BUILD/bin/tesserad" (tests/support/testd.c).
export BUILD="$bundle"
unset TESSERA_FORCE
python=${PYTHON:-python3}
steps=" ${GPU_CHECK_STEPS:-tests examples bench torch} "
step() { [[ "$steps" == *" $1 "* ]]; }

declare -a summary=()
status=0
note() { summary+=("$(printf '%-44s %s' "$1" "$2")"); }

if [ ! -x "$bundle/bin/tesserad" ]; then
    echo "gpu-check: no bundle at $bundle (see the header of this script)" >&2
    exit 2
fi
{ nvidia-smi || true; } >"$out/nvidia-smi.log" 2>&1

# ---- 1. GPU test suites ----
step tests && for t in "$bundle"/bin/*_test; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    "$t" --jobs 1 --verbose >"$out/$name.log" 2>&1
    rc=$?
    line=$(grep 'Synthesis:' "$out/$name.log" | tail -n 1)
    note "tests $name" "exit $rc: ${line#*Synthesis: }"
    [ "$rc" -eq 0 ] || status=1
done

# ---- 2. examples through the CLI, GPU against CPU ----
if step examples; then
work="$out/examples"
mkdir -p "$work"
cpu_url="ipc://$work/cpu.sock"
gpu_url="ipc://$work/gpu.sock"
"$bundle/bin/tesserad" --backend cpu --listen "$cpu_url" --cache-dir "$work/cpu-cache" \
    --log-level warn >"$out/tesserad-cpu.log" 2>&1 &
cpu_pid=$!
"$bundle/bin/tesserad" --backend cuda --listen "$gpu_url" --cache-dir "$work/gpu-cache" \
    --log-level info >"$out/tesserad-cuda.log" 2>&1 &
gpu_pid=$!
stop_daemons() {
    for p in $cpu_pid $gpu_pid; do
        kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null
    done
}
trap stop_daemons EXIT
cli_bin="$bundle/bin/tessera-cli"
cli() { "$cli_bin" --timeout 120000 "$@"; }
wait_up() { # URL PID
    for _ in $(seq 300); do
        cli --url "$1" ping >/dev/null 2>&1 && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
wait_up "$cpu_url" "$cpu_pid" || note "cpu tesserad" "did not start (tesserad-cpu.log)"
wait_up "$gpu_url" "$gpu_pid" || note "cuda tesserad" "did not start (tesserad-cuda.log)"
cli --url "$gpu_url" info >"$out/info-cuda.txt" 2>&1

examples_ok=0
examples_bad=0
for region in examples/*.json; do
    base=$(basename "$region" .json)
    for dtype in f32 f16 bf16; do
        dir="$work/$base-$dtype"
        mkdir -p "$dir"
        # Rewrites the dtype and writes seeded inputs; prints the -i arguments.
        args=$("$python" - "$region" "$dtype" "$dir" <<'PY'
import json, sys
import numpy as np
path, dtype, d = sys.argv[1:4]
r = json.load(open(path))
r["dtype"] = dtype
r.pop("out_dtype", None)
json.dump(r, open(f"{d}/region.json", "w"))
k = r["kind"]
if k == "matmul":
    sig = [("a", (r["m"], r["k"])), ("b", (r["k"], r["n"]))]
elif k == "fused":
    sig = [("a", (r["m"], r["k"])), ("b", (r["k"], r["n"]))]
    if "bias" in r.get("epilogue", []):
        sig.append(("bias", (r["n"],)))
    if r.get("residual"):
        sig.append(("residual", (r["m"], r["n"])))
elif k == "gated":
    sig = [("a", (r["m"], r["k"])), ("wg", (r["k"], r["h"])), ("wu", (r["k"], r["h"]))]
elif k == "attention":
    hkv = r.get("heads_kv", r["heads"])
    dv = r.get("head_dim_v", r["head_dim"])
    sig = [("q", (r["batch"], r["heads"], r["seq_q"], r["head_dim"])),
           ("k", (r["batch"], hkv, r["seq_k"], r["head_dim"])),
           ("v", (r["batch"], hkv, r["seq_k"], dv))]
else:
    sig = [(i["name"], tuple(i["shape"])) for i in r["inputs"]]
rng = np.random.default_rng(20261130)
out = []
for name, shape in sig:
    np.save(f"{d}/{name}.npy", rng.standard_normal(shape).astype(np.float32))
    out.append(f"-i {name}={d}/{name}.npy")
print(" ".join(out))
PY
        )
        # shellcheck disable=SC2086
        cli --url "$cpu_url" run "$dir/region.json" $args -o "$dir/ref.npy" \
            >"$dir/cpu.log" 2>&1
        # shellcheck disable=SC2086
        cli --url "$gpu_url" run "$dir/region.json" $args -o "$dir/gpu.npy" \
            >"$dir/gpu.log" 2>&1
        verdict=$("$python" - "$dir" "$dtype" <<'PY'
import os, sys
import numpy as np
d, dtype = sys.argv[1:3]
bound = {"f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}[dtype]
if not os.path.exists(f"{d}/gpu.npy"):
    print("FAIL no GPU output: " + open(f"{d}/gpu.log").read().strip().replace("\n", " ")[:200])
    sys.exit()
if not os.path.exists(f"{d}/ref.npy"):
    print("FAIL no reference output")
    sys.exit()
g = np.load(f"{d}/gpu.npy").astype(np.float64)
w = np.load(f"{d}/ref.npy").astype(np.float64)
if g.shape != w.shape:
    print(f"FAIL shape {g.shape} vs {w.shape}")
    sys.exit()
if (np.isnan(g) != np.isnan(w)).any() or (np.isinf(g) & (g != w)).any():
    print("FAIL NaN/inf positions differ")
    sys.exit()
f = np.isfinite(w)
den = np.linalg.norm(w[f])
rel = np.linalg.norm((g - w)[f]) / den if den > 0 else np.linalg.norm((g - w)[f])
print(f"{'PASS' if rel <= bound else 'FAIL'} rel {rel:.3e} bound {bound:g}")
PY
        )
        echo "$base $dtype: $verdict" >>"$out/examples.log"
        case $verdict in
        PASS*) examples_ok=$((examples_ok + 1)) ;;
        *) examples_bad=$((examples_bad + 1)); status=1 ;;
        esac
    done
done
note "examples x dtypes via tessera-cli run" "$examples_ok passed, $examples_bad failed"
stop_daemons
trap - EXIT
fi

# ---- 3. gpu_bench ----
if ! step bench; then
    :
elif [ -x "$bundle/bin/gpu_bench" ]; then
    "$bundle/bin/gpu_bench" >"$out/gpu_bench.log" 2>&1
    note "gpu_bench" "exit $? (table in gpu_bench.log)"
else
    note "gpu_bench" "not in the bundle"
fi

# ---- 4. torch baselines ----
if step torch; then
    "$python" tests/bench/torch_baselines.py >"$out/torch_baselines.log" 2>&1
    note "torch_baselines.py" "exit $? (torch_baselines.log)"
fi

echo
echo "logs: $out"
[ -f "$out/examples.log" ] && cat "$out/examples.log"
echo
[ -f "$out/gpu_bench.log" ] && cat "$out/gpu_bench.log"
echo
[ -f "$out/torch_baselines.log" ] && tail -n 20 "$out/torch_baselines.log"
echo
echo "==== summary ===="
printf '%s\n' "${summary[@]}"
exit $status
