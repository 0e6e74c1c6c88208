"""The Python path: a torch tensor through tessera.run on a pointwise region
against torch eager on the same tensor, in one run.

    TESSERA_URL=ipc:///path/sock python3 tests/bench/python_bench.py [--sizes 1048576,...]

Uses CUDA tensors (the CUDA IPC path) when torch sees a GPU, CPU tensors (numpy
and shared memory) otherwise. Prints a markdown table: median wall time of
tessera.run and of the eager expression, and their ratio. Exits 0 with
"skipped" when torch is not installed.
"""
import sys

import bench_util

torch = bench_util.torch_or_skip("python_bench")

import tessera  # noqa: E402


def region(n):
    return tessera.Region({
        "kind": "pointwise", "dtype": "f32",
        "inputs": [{"name": "a", "shape": [n]}, {"name": "b", "shape": [n]}],
        "ops": [{"op": "add", "args": ["a", "b"], "out": "t"},
                {"op": "gelu", "args": ["t"], "out": "y"}],
        "output": "y"})


def main():
    sizes = [1 << 10, 1 << 20, 1 << 24]
    if len(sys.argv) == 3 and sys.argv[1] == "--sizes":
        sizes = [int(s) for s in sys.argv[2].split(",")]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    client = tessera.connect()
    print("\n### torch tensor through tessera.run vs torch eager (%s, ms, median of 20)\n"
          % device)
    print("| elements | tessera.run | torch eager | ratio |\n| --- | --- | --- | --- |")
    for n in sizes:
        r = region(n)
        a = torch.randn(n, device=device)
        b = torch.randn(n, device=device)
        ours = bench_util.timed(lambda: client.run(r, [a, b]), sync, 20)
        eager = bench_util.timed(lambda: torch.nn.functional.gelu(a + b, approximate="tanh"), sync, 20)
        y = client.run(r, [a, b])
        err = (y - torch.nn.functional.gelu(a + b, approximate="tanh")).abs().max().item()
        print("| %d | %.3f | %.3f | %.2f× (max abs diff %.1e) |" % (n, ours, eager, ours / eager,
                                                                    err))


if __name__ == "__main__":
    main()
