"""A Llama-style block through torch.compile(backend="tessera") against eager
and inductor, and a tiny op through the tessera::pointwise custom op against the
daemon's empty request, in one run.

    TESSERA_URL=ipc:///path/sock TESSERA_CLIENT_LIB=build/client/libtessera-client.so \\
        python3 tests/bench/llama_block_bench.py [--small] [--repeats N] [--modes LIST]

The block (client/python/tests/llama_block.py, random weights scaled
1/sqrt(fan-in), without its pointwise tail): RMSNorm -> attention with GQA
(causal SDPA) -> residual -> RMSNorm -> SwiGLU MLP -> residual; by default
batch 8, seq 2048, hidden 4096, 32 heads, 8 kv heads, FFN 14336, bf16, on the
GPU when torch sees one (the daemon must then run the cuda backend on the same
node). --small runs a small block (batch 2, seq 64, hidden
256, 8 heads, 2 kv heads, FFN 512) for a correctness pass on the CPU backend.

For each mode (eager, inductor, inductor max-autotune, tessera) the figure is
the median over --repeats calls of one forward pass, after warm-up calls that
compile. Each compiled mode's output is compared with eager's:
||y - eager||_2 / ||eager||_2, which must stay within 16 u(bf16) (the block
passes a value through 8 roundings, and eager rounds as often); the run exits
1 otherwise. The tessera line also says what the backend took and left.

The tiny op: a 1 Ki-element pointwise region (x * 2 + 1) through
torch.ops.tessera.pointwise on a tensor of the block's device, against the
daemon's empty request (Client.hello, the floor of any call; the bare nng echo
is one line of dataplane_bench's output) and the eager expression. Prints
markdown tables. Exits 0 with "skipped" when torch is not installed.
"""
import argparse
import json
import sys

import bench_util
from bench_util import timed

torch = bench_util.torch_or_skip("llama_block_bench")

import tessera  # noqa: E402
from llama_block import Block  # noqa: E402
from tessera import torch_backend, torch_ops  # noqa: E402
from torch_util import rel  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="a small block (CPU correctness pass)")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--modes", default="eager,inductor,max-autotune,tessera")
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if args.small:
        shape = dict(batch=2, seq=64, dim=256, heads=8, heads_kv=2, ffn=512)
    else:
        shape = dict(batch=8, seq=2048, dim=4096, heads=32, heads_kv=8, ffn=14336)
    dtype = torch.bfloat16
    client = tessera.connect(force="")
    torch_ops.set_client(client)
    hello = client.hello()
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    print("device %s, torch %s, daemon %s (%s backend) at %s" % (
        torch.cuda.get_device_name() if cuda else "cpu", torch.__version__,
        hello["daemon_version"], hello["backend"], client.url))
    print("block: batch %(batch)d, seq %(seq)d, hidden %(dim)d, heads %(heads)d, kv heads "
          "%(heads_kv)d, ffn %(ffn)d, bf16" % shape)

    block = Block(shape["dim"], shape["heads"], shape["heads_kv"], shape["ffn"], tail=False,
                  seed=1).to(device, dtype)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(shape["batch"], shape["seq"], shape["dim"], generator=g).to(device, dtype)
    bound = 16 * torch.finfo(dtype).eps / 2
    ok = True
    rows = []
    be = torch_backend.make_backend()
    with torch.no_grad():
        eager = block(x)
        modes = {
            "eager": lambda: block,
            "inductor": lambda: torch.compile(block),
            "max-autotune": lambda: torch.compile(block, mode="max-autotune"),
            "tessera": lambda: torch.compile(block, backend=be),
        }
        for mode in args.modes.split(","):
            torch._dynamo.reset()
            fn = modes[mode]()
            y = fn(x)
            err = rel(y, eager)
            ms = timed(lambda: fn(x), sync, args.repeats)
            note = ""
            if mode == "tessera":
                r = be.reports[-1]
                note = "took %s; left %s" % (json.dumps(r.counts, sort_keys=True),
                                             json.dumps(r.reasons, sort_keys=True))
            if err > bound:
                ok = False
                note += " FAIL: error over %.3g" % bound
            rows.append((mode, ms, err, note))
    base = {m: ms for m, ms, _, _ in rows}
    print()
    print("| mode | ms | vs eager | vs inductor | rel error vs eager | notes |")
    print("| --- | --- | --- | --- | --- | --- |")
    for mode, ms, err, note in rows:
        vs_e = "%.2fx" % (base["eager"] / ms) if "eager" in base else ""
        vs_i = "%.2fx" % (base["inductor"] / ms) if "inductor" in base else ""
        print("| %s | %.2f | %s | %s | %.2e | %s |" % (mode, ms, vs_e, vs_i, err, note))

    # The tiny op.
    n = 1024
    region = json.dumps({"kind": "pointwise", "dtype": "f32",
                         "inputs": [{"name": "x", "shape": [n]}],
                         "ops": [{"op": "const", "value": 2.0, "out": "two"},
                                 {"op": "mul", "args": ["x", "two"], "out": "t"},
                                 {"op": "const", "value": 1.0, "out": "one"},
                                 {"op": "add", "args": ["t", "one"], "out": "y"}],
                         "output": "y"})
    t = torch.randn(n, device=device)
    with torch.no_grad():
        y = torch.ops.tessera.pointwise(region, [t])
        if not torch.equal(y, t * 2 + 1):
            print("tiny op: FAIL: differs from t * 2 + 1")
            ok = False
        op_ms = timed(lambda: torch.ops.tessera.pointwise(region, [t]), sync, 200, warmup=20)
        hello_ms = timed(client.hello, lambda: None, 200, warmup=20)
        eager_ms = timed(lambda: t * 2 + 1, sync, 200, warmup=20)
    print()
    print("| tiny op, %d floats (%s) | us | vs empty request |" % (n, device.type))
    print("| --- | --- | --- |")
    print("| empty request (hello) | %.1f | 1.00x |" % (hello_ms * 1e3))
    print("| torch.ops.tessera.pointwise | %.1f | %.2fx |" % (op_ms * 1e3, op_ms / hello_ms))
    print("| eager t * 2 + 1 | %.1f | |" % (eager_ms * 1e3))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
