#!/usr/bin/env python3
"""The tessera:: custom ops from torch: a fused product with a gelu epilogue and
a residual, trained for one step (its backward runs as further regions), and
GQA attention, each checked against torch.

It starts nothing itself: the daemon is the one at $TESSERA_URL, for instance

    build/bin/tesserad --listen ipc:///tmp/tesserad.sock --backend cpu &
    TESSERA_URL=ipc:///tmp/tesserad.sock python3 examples/python/torch_ops.py

with torch and the tessera package installed (or client/python on PYTHONPATH).
CPU tensors travel as data; on a daemon running the cuda backend on this node,
CUDA tensors stay on the GPU (CUDA IPC). Exits 0 when every result matches.
"""
import json
import sys

import torch

import tessera
import tessera.torch_ops  # noqa: F401  (registers torch.ops.tessera.*)

F = torch.nn.functional


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


def main() -> int:
    torch.manual_seed(0)
    bound = torch.finfo(torch.bfloat16).eps  # two roundings to bf16
    ok = True

    # out = gelu(a·b + bias) + residual, one region; a and b learn.
    m, k, n = 64, 128, 96
    fused = json.dumps({"kind": "fused", "dtype": "bf16", "m": m, "n": n, "k": k,
                        "epilogue": ["bias", "gelu"], "residual": True})
    a = torch.randn(m, k, dtype=torch.bfloat16, requires_grad=True)
    b = (torch.randn(k, n) * k ** -0.5).to(torch.bfloat16).requires_grad_(True)
    bias = torch.randn(n, dtype=torch.bfloat16)
    res = torch.randn(m, n, dtype=torch.bfloat16)
    y = torch.ops.tessera.fused(fused, a, b, bias, res)
    y.square().mean().backward()

    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    want = F.gelu(a64 @ b64 + bias.double(), approximate="tanh") + res.double()
    want.square().mean().backward()
    errs = (rel(y, want), rel(a.grad, a64.grad), rel(b.grad, b64.grad))
    print("fused bias+gelu+residual %s: output %.1e, grad a %.1e, grad b %.1e (bound %.1e)"
          % (tuple(y.shape), *errs, 2 * bound))
    ok &= all(e <= 2 * bound for e in errs)

    # Attention with 8 query heads over 2 key/value heads, causal.
    att = json.dumps({"kind": "attention", "dtype": "bf16", "batch": 2, "heads": 8,
                      "heads_kv": 2, "seq_q": 32, "seq_k": 32, "head_dim": 64, "causal": True})
    q = torch.randn(2, 8, 32, 64, dtype=torch.bfloat16)
    kv = torch.randn(2, 2, 32, 64, dtype=torch.bfloat16)
    o = torch.ops.tessera.attention(att, q, kv, kv)
    want = F.scaled_dot_product_attention(q.double(), kv.double(), kv.double(), is_causal=True,
                                          enable_gqa=True)
    print("attention %s: output %.1e (bound %.1e)" % (tuple(o.shape), rel(o, want), bound))
    ok &= rel(o, want) <= bound

    # A wrong shape is refused with the CLI's status and message.
    try:
        torch.ops.tessera.attention(att, q.transpose(1, 2), kv, kv)
        ok = False
    except tessera.TesseraError as e:
        print("refused as expected: %s" % e)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
