#!/usr/bin/env python3
"""Runs two regions of examples/ on numpy arrays through a running tesserad and
checks the results against numpy.

It starts nothing itself: the daemon is the one at $TESSERA_URL (default
ipc:///run/tesserad/tesserad.sock), for instance

    build/bin/tesserad --listen ipc:///tmp/tesserad.sock --backend cpu &
    TESSERA_URL=ipc:///tmp/tesserad.sock python3 examples/python/numpy_run.py

with the tessera package installed (pip install client/python) or on
PYTHONPATH, and libtessera-client where it finds it (docs/python.md).
"""
import os
import sys

import numpy as np

import tessera

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def main() -> int:
    rng = np.random.default_rng(0)
    with tessera.connect() as c:  # $TESSERA_URL
        info = c.hello()
        print("daemon %s, %s backend, at %s" % (info["daemon_version"], info["backend"], c.url))

        # A bf16 matmul (examples/matmul.json): inputs by name; float32 data is
        # rounded to bf16 on the way in, the output comes back as float32.
        matmul = tessera.Region.from_json(os.path.join(EXAMPLES, "matmul.json"))
        print("matmul reads", ", ".join("%s %s" % (t.name, t.shape) for t in matmul.inputs))
        a = rng.standard_normal(matmul.inputs[0].shape, dtype=np.float32)
        b = rng.standard_normal(matmul.inputs[1].shape, dtype=np.float32)
        y, decision = c.run(matmul, {"a": a, "b": b}, with_decision=True)
        want = a.astype(np.float64) @ b.astype(np.float64)
        err = float(np.max(np.abs(y - want)) / np.max(np.abs(want)))
        print("matmul -> %s %s by %s (tier %d, %s); max error %.2g of the largest value"
              % (y.dtype, y.shape, decision.candidate, decision.tier, decision.reason, err))
        if err > 2e-2:  # two bf16 roundings of the inputs
            print("matmul: error %.3g is past the bf16 bound" % err, file=sys.stderr)
            return 1

        # The input checks are tessera-cli's: the transposed matrix has the right
        # number of elements but the wrong shape.
        try:
            c.run(matmul, [a.T.copy(), b])
            print("matmul: a transposed input was accepted", file=sys.stderr)
            return 1
        except tessera.TesseraError as e:
            print("refused as expected: %s" % e)

        # An f32 pointwise DAG (examples/pointwise.json), inputs in signature order.
        pw = tessera.Region.from_json(os.path.join(EXAMPLES, "pointwise.json"))
        xs = [rng.standard_normal(t.shape, dtype=np.float32) for t in pw.inputs]
        y = c.run(pw, xs)
        q = np.maximum(xs[0] + xs[1], 0) * (1 / (1 + np.exp(-xs[2]))) * 0.5
        want = np.clip(q, 0, 2.5)
        ok = np.allclose(y, want, rtol=1e-5, atol=1e-6)
        print("pointwise -> %s %s, %s numpy"
              % (y.dtype, y.shape, "matches" if ok else "differs from"))
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
