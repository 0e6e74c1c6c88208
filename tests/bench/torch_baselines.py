#!/usr/bin/env python3
"""Baselines measured with torch on the same GPU, in the same run as tesserad's
benchmarks, so that ratios compare like with like.

Prints one line per case: name, median milliseconds, and TFLOP/s or GB/s.
Timing: CUDA events around each call after warm-up, median of many repeats.
"""
import sys

import torch


def median_ms(fn, warmup=5, reps=30):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def report(name, ms, flop=None, nbytes=None):
    extra = ""
    if flop is not None:
        extra = f"{flop / (ms * 1e-3) / 1e12:.1f} TFLOP/s"
    if nbytes is not None:
        extra = f"{nbytes / (ms * 1e-3) / 1e9:.1f} GB/s"
    print(f"torch {name:<40} {ms:9.3f} ms  {extra}", flush=True)


def main():
    which = set(sys.argv[1:])
    dev = "cuda"
    bf = torch.bfloat16
    print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__)

    if not which or "gemm" in which:
        for n in (4096, 8192):
            a = torch.randn(n, n, device=dev, dtype=bf)
            b = torch.randn(n, n, device=dev, dtype=bf)
            report(f"matmul bf16 {n}^3", median_ms(lambda: a @ b), flop=2 * n ** 3)
        for m in (16, 64):
            a = torch.randn(m, 8192, device=dev, dtype=bf)
            b = torch.randn(8192, 8192, device=dev, dtype=bf)
            report(f"matmul bf16 M{m} N8192 K8192", median_ms(lambda: a @ b), flop=2 * m * 8192 * 8192)
        m, k, h = 8192, 4096, 14336
        a = torch.randn(m, k, device=dev, dtype=bf)
        w = torch.randn(k, h, device=dev, dtype=bf)
        wu = torch.randn(k, h, device=dev, dtype=bf)
        bias = torch.randn(h, device=dev, dtype=bf)
        res = torch.randn(m, h, device=dev, dtype=bf)
        gelu = torch.nn.functional.gelu
        report("fused bias+gelu+residual eager 8192x14336x4096",
               median_ms(lambda: gelu(a @ w + bias, approximate="tanh") + res), flop=2 * m * h * k)
        report("matmul only 8192x14336x4096", median_ms(lambda: a @ w), flop=2 * m * h * k)
        silu = torch.nn.functional.silu
        report("swiglu eager 8192x14336x4096",
               median_ms(lambda: silu(a @ w) * (a @ wu)), flop=4 * m * h * k)
        a16 = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
        b16 = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
        report("matmul f16 4096^3", median_ms(lambda: a16 @ b16), flop=2 * 4096 ** 3)
        ar = torch.randn(3000, 4000, device=dev, dtype=bf)
        br = torch.randn(4000, 5000, device=dev, dtype=bf)
        report("matmul bf16 3000x5000x4000", median_ms(lambda: ar @ br),
               flop=2 * 3000 * 5000 * 4000)
        try:
            fused = torch.compile(lambda p, q, bb, r: gelu(p @ q + bb, approximate="tanh") + r)
            report("fused bias+gelu+residual compiled 8192x14336x4096",
                   median_ms(lambda: fused(a, w, bias, res)), flop=2 * m * h * k)
            swiglu = torch.compile(lambda p, q, u: silu(p @ q) * (p @ u))
            report("swiglu compiled 8192x14336x4096", median_ms(lambda: swiglu(a, w, wu)),
                   flop=4 * m * h * k)
        except Exception as exc:  # torch.compile needs a working toolchain there
            print("torch.compile unavailable:", exc)

    if not which or "pointwise" in which:
        n = 1 << 28
        x = torch.randn(n, device=dev)
        y = torch.randn(n, device=dev)
        z = torch.randn(n, device=dev)
        out = torch.empty_like(x)
        report("device copy f32 2^28", median_ms(lambda: out.copy_(x)), nbytes=2 * 4 * n)
        f = lambda: torch.relu(x + y) * torch.sigmoid(z)
        report("relu(a+b)*sigmoid(c) eager f32 2^28", median_ms(f), nbytes=4 * 4 * n)
        try:
            g = torch.compile(lambda p, q, r: torch.relu(p + q) * torch.sigmoid(r))
            report("relu(a+b)*sigmoid(c) compiled f32 2^28", median_ms(lambda: g(x, y, z)),
                   nbytes=4 * 4 * n)
        except Exception as exc:  # torch.compile needs a working toolchain there
            print("torch.compile unavailable:", exc)
        # The broadcast lane's shape: x (16384 x 8192) times a row w (8192), then silu.
        xb = torch.randn(16384, 8192, device=dev, dtype=bf)
        wb = torch.randn(8192, device=dev, dtype=bf)
        silu = torch.nn.functional.silu
        report("silu(x*w) eager bf16 16384x8192, w (8192)", median_ms(lambda: silu(xb * wb)),
               nbytes=2 * 2 * xb.numel())
        try:
            h = torch.compile(lambda p, q: silu(p * q))
            report("silu(x*w) compiled bf16 16384x8192, w (8192)", median_ms(lambda: h(xb, wb)),
                   nbytes=2 * 2 * xb.numel())
        except Exception as exc:  # torch.compile needs a working toolchain there
            print("torch.compile unavailable:", exc)

    if not which or "attention" in which:
        sdpa = torch.nn.functional.scaled_dot_product_attention
        # (name, B, H, Hkv, seq_q, seq_k, D, causal): the shapes of
        # tests/bench/shapes/att_*.json and kernels/attn_check.cu's timed cases.
        cases = [("B4 H32 S4096 D128", 4, 32, 32, 4096, 4096, 128, False),
                 ("causal B4 H32 kv8 S4096 D128", 4, 32, 8, 4096, 4096, 128, True),
                 ("B4 H32 S4096 D64", 4, 32, 32, 4096, 4096, 64, False),
                 ("causal B4 H32 S4096 D64", 4, 32, 32, 4096, 4096, 64, True),
                 ("decode B32 H32 kv8 seq_k 8192 D128", 32, 32, 8, 1, 8192, 128, False),
                 ("decode B1 H32 kv8 seq_k 8192 D128", 1, 32, 8, 1, 8192, 128, False)]
        for name, b, h, hkv, m, n, d, causal in cases:
            q = torch.randn(b, h, m, d, device=dev, dtype=bf)
            k = torch.randn(b, hkv, n, d, device=dev, dtype=bf)
            v = torch.randn(b, hkv, n, d, device=dev, dtype=bf)
            flop = 4 * b * h * m * n * d / (2 if causal and m == n else 1)
            gqa = {"enable_gqa": True} if hkv != h else {}
            report(f"sdpa bf16 {name}",
                   median_ms(lambda: sdpa(q, k, v, is_causal=causal, **gqa)), flop=flop)

if __name__ == "__main__":
    main()
