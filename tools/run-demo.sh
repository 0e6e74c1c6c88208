#!/usr/bin/env bash
# `make run`: starts the built tesserad in the background on its default ipc
# endpoint with its default cache directory, waits until `tessera-cli ping`
# answers, shows `info`, compiles examples/matmul.json, runs
# examples/pointwise.json on generated inputs, prints a summary of the output and
# stops the daemon. The default endpoint lives in /run/tesserad, so this wants
# root; otherwise (or when TESSERA_DEMO_PRIVATE=1) the daemon listens on a private
# endpoint with a private cache in a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
tesserad="$BUILD/bin/tesserad"
cli="$BUILD/bin/tessera-cli"
work=$(mktemp -d /tmp/tesserad-demo.XXXXXX)
daemon_args=(--log-level warn)

if [ "${TESSERA_DEMO_PRIVATE:-0}" != 1 ] && mkdir -p /run/tesserad 2>/dev/null &&
    [ -w /run/tesserad ] && mkdir -p /var/cache/tesserad 2>/dev/null; then
    export TESSERA_URL=ipc:///run/tesserad/tesserad.sock
else
    echo "run-demo: /run/tesserad is not writable; using a private endpoint in $work"
    export TESSERA_URL="ipc://$work/tesserad.sock"
    daemon_args+=(--listen "$TESSERA_URL" --cache-dir "$work/cache")
fi

"$tesserad" "${daemon_args[@]}" &
pid=$!
stop_daemon() {
    if [ -n "${pid:-}" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        wait "$pid" || true
    fi
    rm -rf "$work"
}
trap stop_daemon EXIT

for _ in $(seq 200); do
    if "$cli" ping >/dev/null 2>&1; then
        break
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "run-demo: tesserad exited during start-up" >&2
        exit 1
    fi
    sleep 0.05
done

# The interpreter for the input generator and the check: the first with numpy.
. tools/find-python.sh
if ! find_python numpy; then
    echo "run-demo: no python3 with numpy (tools/install-deps.sh installs python3-numpy)" >&2
    exit 1
fi

set -x
"$cli" ping
"$cli" info
"$cli" compile examples/matmul.json
{ set +x; } 2>/dev/null

"$py" - "$work" <<'PY'
import sys
import numpy as np
rng = np.random.default_rng(0)
d = sys.argv[1]
np.save(f"{d}/a.npy", rng.standard_normal((16, 32)).astype(np.float32))
np.save(f"{d}/b.npy", rng.standard_normal((16, 32)).astype(np.float32))
np.save(f"{d}/c.npy", rng.standard_normal((32,)).astype(np.float32))
PY

set -x
"$cli" run examples/pointwise.json -i a="$work/a.npy" -i b="$work/b.npy" -i c="$work/c.npy" \
    -o /tmp/out.npy
{ set +x; } 2>/dev/null

"$py" - "$work" <<'PY'
import sys
import numpy as np
d = sys.argv[1]
a, b, c = (np.load(f"{d}/{n}.npy") for n in "abc")
y = np.load("/tmp/out.npy")
# The same DAG in numpy float32: clip(relu(a + b) * sigmoid(c) * 0.5, 0, 2.5).
want = np.clip(np.maximum(a + b, 0) * (1 / (1 + np.exp(-c))) * np.float32(0.5), 0, 2.5)
print(f"/tmp/out.npy: shape {y.shape} {y.dtype}, min {y.min():.6g} max {y.max():.6g} "
      f"mean {y.mean():.6g}; max |difference| from numpy {np.abs(y - want).max():.3g}")
PY

kill -TERM "$pid"
status=0
wait "$pid" || status=$?
pid=
echo "tesserad stopped (exit status $status)"
exit "$status"
