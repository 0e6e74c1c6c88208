"""examples/python/numpy_run.py, run as written against the test daemon."""
import os
import subprocess
import sys

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
