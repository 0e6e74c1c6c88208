#!/usr/bin/env python3
"""torch.compile(model, backend="tessera") on a small transformer MLP block:
prints what the backend took from the graph and what it left to inductor, and
checks the output against eager.

It starts nothing itself: the daemon is the one at $TESSERA_URL, for instance

    build/bin/tesserad --listen ipc:///tmp/tesserad.sock --backend cpu &
    TESSERA_URL=ipc:///tmp/tesserad.sock python3 examples/python/torch_compile.py

with torch and the tessera package installed (or client/python on PYTHONPATH).
Inductor needs a C++ compiler on the CPU. Exits 0 when the output matches.
"""
import sys

import torch

import tessera.torch_backend  # registers backend="tessera"

nn = torch.nn
F = torch.nn.functional


class Mlp(nn.Module):
    """RMSNorm -> SwiGLU -> residual -> a linear with bias and tanh-gelu."""

    def __init__(self, dim: int = 128, ffn: int = 256) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(dim)
        self.gate = nn.Linear(dim, ffn, bias=False)
        self.up = nn.Linear(dim, ffn, bias=False)
        self.down = nn.Linear(ffn, dim, bias=False)
        self.head = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return F.gelu(self.head(x), approximate="tanh")


def main() -> int:
    torch.manual_seed(0)
    model = Mlp().to(torch.bfloat16)
    x = torch.randn(4, 16, 128, dtype=torch.bfloat16)
    with torch.no_grad():
        want = model(x)
        got = torch.compile(model, backend="tessera")(x)
    report = tessera.torch_backend.default.reports[-1]
    print(report.summary())
    for kind, nodes, _, pick in report.taken:
        print("  %s region: %s, served by %s" % (kind, ", ".join(nodes), pick))
    for node, target, reason in report.left:
        print("  left %s (%s): %s" % (node, target, reason))
    err = ((got.double() - want.double()).norm() / want.double().norm()).item()
    bound = 8 * torch.finfo(torch.bfloat16).eps
    print("output %s, relative error against eager %.1e (bound %.1e)"
          % (tuple(got.shape), err, bound))
    return 0 if err <= bound else 1


if __name__ == "__main__":
    sys.exit(main())
