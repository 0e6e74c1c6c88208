"""The examples in examples/python, run as written against the test daemon (the
torch ones skip without torch)."""
import os
import subprocess
import sys

import pytest

from conftest import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "python", "numpy_run.py")


def test_numpy_example_runs(daemon):
    env = dict(os.environ, TESSERA_URL=daemon.url,
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(ROOT, "client", "python"),
                                                        os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, EXAMPLE], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("daemon ") and "cpu backend, at " + daemon.url in lines[0]
    assert lines[1] == "matmul reads a (128, 64), b (64, 96)"
    assert lines[2].startswith("matmul -> float32 (128, 96) by ")
    assert lines[3] == ("refused as expected: BUFFER_MISMATCH: a: shape (64,128), "
                        "expected (128,64)")
    assert lines[4] == "pointwise -> float32 (16, 32), matches numpy"


def run_example(daemon, name):
    env = dict(os.environ, TESSERA_URL=daemon.url,
               PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(ROOT, "client", "python"),
                                                        os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", name)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.splitlines()


def test_torch_ops_example_runs(daemon):
    pytest.importorskip("torch")
    lines = run_example(daemon, "torch_ops.py")
    assert lines[0].startswith("fused bias+gelu+residual (64, 96): output ")
    assert lines[1].startswith("attention (2, 8, 32, 64): output ")
    assert lines[2] == ("refused as expected: BUFFER_MISMATCH: q: shape (2,32,8,64), "
                        "expected (2,8,32,64)")


def test_torch_compile_example_runs(daemon):
    pytest.importorskip("torch")
    lines = run_example(daemon, "torch_compile.py")
    assert lines[:5] == [
        "tessera: took 2 fused, 1 gated; left 1 node to the fallback",
        "  gated region: linear, linear_1, silu, mul, served by reference (tier 0)",
        "  fused region: linear_2, x, served by reference (tier 0)",
        "  fused region: linear_3, gelu, served by reference (tier 0)",
        "  left h (rms_norm): no region for rms_norm",
    ]
    assert lines[5].startswith("output (4, 16, 128), relative error against eager ")
