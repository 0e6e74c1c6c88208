"""What the Python benchmarks share: the client package and the Python tests'
shared modules on the import path, torch or a clean skip, and the median wall
time of a call.

A benchmark run as a script finds this module beside it (Python puts the
script's folder first on the path).
"""
import os
import statistics
import sys
import time

_ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(_ROOT, "client", "python"))
# The Python tests' modules a benchmark shares with them (llama_block, torch_util).
sys.path.insert(0, os.path.join(_ROOT, "client", "python", "tests"))


def torch_or_skip(bench, need_gpu=False):
    """The torch module; without torch (or, when need_gpu, without a GPU torch
    sees) prints "BENCH: skipped: ..." and exits 0."""
    try:
        import torch
    except ImportError:
        print("%s: skipped: torch is not installed" % bench)
        sys.exit(0)
    if need_gpu and not torch.cuda.is_available():
        print("%s: skipped: torch sees no GPU" % bench)
        sys.exit(0)
    return torch


def timed(fn, sync, repeats, warmup=3, calls=1):
    """Median wall ms of one of calls calls that each fn() makes, over repeats
    calls of fn (after warmup calls); sync() waits for the device."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3 / calls)
    return statistics.median(times)
