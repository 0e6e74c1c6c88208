"""The shapes a framework sends, through a running tesserad's default path,
against torch on the same tensors in the same run.

    TESSERA_URL=ipc:///path/sock python3 tests/bench/daemon_shapes_bench.py [NAME ...]

For each region (NAME filters by substring): torch tensors on the GPU, a
`compile` with default options (no force, verification on: the arbiter's own
pick, its verdict and the compile time are printed), the tensors imported by
the daemon with CUDA IPC, then batches of 20 launches in one request each; the
figure is the median over 5 batches of the batch's wall time / 20, as a client
sees it, and the daemon's device time per launch (its events around a batch's
launches; the rest of the wall time is what the request adds). "ring" is the
same 20 launches through a submission ring (Ring.run: submitted together, no
message; needs an ipc:// daemon), median of 5 runs / 20. torch runs the
same computation on the same tensors, 20 calls between two synchronizations,
median of 5. The outputs of one launch are compared
(max |tesserad - torch| / max |torch|). Prints a markdown table. Exits 0 with
"skipped" when torch or a GPU is missing.
"""
import statistics
import sys
import time

import bench_util

torch = bench_util.torch_or_skip("daemon_shapes_bench", need_gpu=True)

import tessera  # noqa: E402
from tessera import torch_support  # noqa: E402

BATCH = 20
REPEATS = 5
F = torch.nn.functional


def attention(name, b, h, hkv, m, n, d, causal):
    region = {"kind": "attention", "dtype": "bf16", "batch": b, "heads": h, "heads_kv": hkv,
              "seq_q": m, "seq_k": n, "head_dim": d, "causal": causal}
    # The region's causal mask is bottom-right, torch's is_causal top-left: the
    # same for seq_q = seq_k, and decode shapes here are not causal.
    assert not causal or m == n
    gqa = {"enable_gqa": True} if hkv != h else {}
    flop = 4 * b * h * m * n * d / (2 if causal else 1)

    return (name, region, [(b, h, m, d), (b, hkv, n, d), (b, hkv, n, d)],
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa),
            flop)


def matmul(name, dtype, m, n, k):
    return (name, {"kind": "matmul", "dtype": dtype, "m": m, "n": n, "k": k},
            [(m, k), (k, n)], lambda a, w: a @ w, 2 * m * n * k)


def gated(name, dtype, m, k, h, compiled=False):
    """act(A·Wg)·(A·Wu) with silu, against torch's two products and the
    elementwise tail (eager, or torch.compile of it when compiled)."""
    fn = lambda a, wg, wu: F.silu(a @ wg) * (a @ wu)  # noqa: E731
    return (name, {"kind": "gated", "dtype": dtype, "m": m, "k": k, "h": h, "gate_act": "silu"},
            [(m, k), (k, h), (k, h)], torch.compile(fn) if compiled else fn, 4 * m * k * h)


def fused(name, dtype, m, n, k, epilogue, residual, reduction, torch_fn, compiled):
    """A fused product against the same ops unfused in torch: eager, or
    torch.compile of the same expression when compiled."""
    region = {"kind": "fused", "dtype": dtype, "m": m, "n": n, "k": k, "epilogue": epilogue,
              "residual": residual, "reduction": reduction}
    shapes = [(m, k), (k, n)] + ([(n,)] if "bias" in epilogue else []) + \
        ([(m, n)] if residual else [])
    return (name, region, shapes, torch.compile(torch_fn) if compiled else torch_fn,
            2 * m * n * k)


def pointwise(name, dtype, inputs, ops, torch_fn):
    """A pointwise DAG against torch.compile of the same expression (the lane's
    goal); the rate columns show TB/s moved (inputs read, output written)."""
    region = {"kind": "pointwise", "dtype": dtype,
              "inputs": [{"name": n, "shape": list(s)} for n, s in inputs],
              "ops": ops, "output": ops[-1]["out"]}
    return (name, region, [s for _, s in inputs], torch.compile(torch_fn), None)


CASES = [
    attention("attention B4 H32 S4096 D128", 4, 32, 32, 4096, 4096, 128, False),
    attention("attention causal B4 H32 kv8 S4096 D128", 4, 32, 8, 4096, 4096, 128, True),
    attention("attention B4 H32 S4096 D64", 4, 32, 32, 4096, 4096, 64, False),
    attention("attention causal B4 H32 S4096 D64", 4, 32, 32, 4096, 4096, 64, True),
    attention("attention decode B32 H32 kv8 seq_k 8192", 32, 32, 8, 1, 8192, 128, False),
    attention("attention decode B1 H32 kv8 seq_k 8192", 1, 32, 8, 1, 8192, 128, False),
    matmul("matmul bf16 8192^3", "bf16", 8192, 8192, 8192),
    matmul("matmul f16 4096^3", "f16", 4096, 4096, 4096),
    matmul("matmul bf16 3000x5000x4000", "bf16", 3000, 5000, 4000),
    matmul("matmul bf16 M16 N8192 K8192", "bf16", 16, 8192, 8192),
    matmul("matmul bf16 M1 N8192 K8192", "bf16", 1, 8192, 8192),
    matmul("matmul bf16 M64 N8192 K8192", "bf16", 64, 8192, 8192),
    matmul("matmul bf16 M16 N14336 K4096", "bf16", 16, 14336, 4096),
    matmul("matmul bf16 M32 N4096 K14336", "bf16", 32, 4096, 14336),
    gated("gated SwiGLU bf16 M16 K4096 H14336", "bf16", 16, 4096, 14336),
    gated("gated SwiGLU bf16 M8192 K4096 H14336 (torch eager)", "bf16", 8192, 4096, 14336),
    gated("gated SwiGLU bf16 M8192 K4096 H14336 (torch.compile)", "bf16", 8192, 4096, 14336,
          True),
    fused("fused bias+gelu+residual bf16 8192x14336x4096 (torch.compile)", "bf16",
          8192, 14336, 4096, ["bias", "gelu"], True, None,
          lambda a, w, bias, res: F.gelu(a @ w + bias, approximate="tanh") + res, True),
    fused("fused rmsnorm bf16 8192x4096x4096 (torch eager)", "bf16", 8192, 4096, 4096, [],
          False, "rmsnorm", lambda a, w: F.rms_norm(a @ w, (4096,), eps=1e-6), False),
    fused("fused rmsnorm bf16 8192x4096x4096 (torch.compile)", "bf16", 8192, 4096, 4096, [],
          False, "rmsnorm", lambda a, w: F.rms_norm(a @ w, (4096,), eps=1e-6), True),
    fused("fused bias+silu, rmsnorm bf16 8192x4096x4096 (torch.compile)", "bf16",
          8192, 4096, 4096, ["bias", "silu"], False, "rmsnorm",
          lambda a, w, bias: F.rms_norm(F.silu(a @ w + bias), (4096,), eps=1e-6), True),
    fused("fused layer_norm bf16 8192x4096x4096 (torch.compile)", "bf16", 8192, 4096, 4096, [],
          False, "layer_norm", lambda a, w: F.layer_norm(a @ w, (4096,), eps=1e-6), True),
    fused("fused bias+silu, layer_norm bf16 8192x4096x4096 (torch.compile)", "bf16",
          8192, 4096, 4096, ["bias", "silu"], False, "layer_norm",
          lambda a, w, bias: F.layer_norm(F.silu(a @ w + bias), (4096,), eps=1e-6), True),
    fused("fused softmax bf16 8192x4096x4096 (torch.compile)", "bf16", 8192, 4096, 4096, [],
          False, "softmax", lambda a, w: torch.softmax(a @ w, -1), True),
    pointwise("pointwise relu(a+b)*sigmoid(c) f32 2^28 (torch.compile)", "f32",
              [("a", (1 << 28,)), ("b", (1 << 28,)), ("c", (1 << 28,))],
              [{"op": "add", "args": ["a", "b"], "out": "s"},
               {"op": "relu", "args": ["s"], "out": "r"},
               {"op": "sigmoid", "args": ["c"], "out": "g"},
               {"op": "mul", "args": ["r", "g"], "out": "y"}],
              lambda a, b, c: torch.relu(a + b) * torch.sigmoid(c)),
    pointwise("pointwise silu(x*w) bf16 16384x8192, w (8192) (torch.compile)", "bf16",
              [("x", (16384, 8192)), ("w", (8192,))],
              [{"op": "mul", "args": ["x", "w"], "out": "p"},
               {"op": "silu", "args": ["p"], "out": "y"}],
              lambda x, w: F.silu(x * w)),
]

TORCH_DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def median_per_call(fn):
    return bench_util.timed(fn, torch.cuda.synchronize, REPEATS, warmup=1, calls=BATCH)


def main():
    want = sys.argv[1:]
    client = tessera.connect()
    dev = torch.device("cuda")
    print("\n### Through tesserad's default path vs torch, %s (ms per call, median of %d "
          "batches of %d)\n" % (torch.cuda.get_device_name(0), REPEATS, BATCH))
    print("| region | candidate (tier) | verdict | compile ms | tesserad ms | TFLOP/s | "
          "device ms | torch ms | TFLOP/s | torch / tesserad | ring ms | torch / ring | "
          "max rel diff |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, spec, shapes, torch_fn, flop in CASES:
        if want and not any(w in name for w in want):
            continue
        dtype = TORCH_DTYPES[spec["dtype"]]
        torch.manual_seed(0)
        ins = [torch.randn(shape, device=dev, dtype=dtype) for shape in shapes]
        region = tessera.Region(spec)
        out = torch.empty(region.output.shape, dtype=dtype, device=dev)
        t0 = time.perf_counter()
        compiled = client.compile(region)
        compile_ms = (time.perf_counter() - t0) * 1e3
        d = compiled.decision
        torch.cuda.synchronize()
        bufs = [torch_support._import(client, torch, t, s) for t, s in zip(ins, region.inputs)]
        out_buf = torch_support._import(client, torch, out, region.output)
        launches = [(compiled, bufs, out_buf)] * BATCH
        ms = median_per_call(lambda: client.batch(launches))
        # The daemon's own device time per launch (events around the batch's
        # launches): what the request adds is the rest of the wall time.
        device_ms = statistics.median(client.batch(launches)["device_ms"]
                                      for _ in range(REPEATS)) / BATCH
        # The same launches through a submission ring (the same-node path):
        # submitted together, sent to the device in groups.
        with client.ring([(compiled, bufs, out_buf)], slots=BATCH) as ring:
            ring.run([0] * BATCH)
            ring_ms = median_per_call(lambda: ring.run([0] * BATCH))
        ref = torch_fn(*ins)
        torch_ms = median_per_call(lambda: [torch_fn(*ins) for _ in range(BATCH)])
        client.batch([(compiled, bufs, out_buf)])
        diff = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        if flop is None:  # pointwise: bytes moved, in TB/s
            moved = sum(t.numel() * t.element_size() for t in ins) + out.numel() * out.element_size()
            rate = lambda t_ms: "%.2f TB/s" % (moved / (t_ms * 1e-3) / 1e12)  # noqa: E731
        else:
            rate = lambda t_ms: "%.1f" % (flop / (t_ms * 1e-3) / 1e12)  # noqa: E731
        print("| %s | %s (%d) | %s | %.0f | %.3f | %s | %.3f | %.3f | %s | %.2f | %.3f | %.2f "
              "| %.1e |"
              % (name, d.candidate, d.tier, "%s (%s)" % (d.verdict.state, d.verdict.method),
                 compile_ms, ms, rate(ms), device_ms, torch_ms, rate(torch_ms), torch_ms / ms,
                 ring_ms, torch_ms / ring_ms, diff),
              flush=True)
        client.release_imports()
        del ins, out, ref
        torch.cuda.empty_cache()
    client.close()


if __name__ == "__main__":
    main()
