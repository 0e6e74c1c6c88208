"""The "tessera" torch.compile backend on a real daemon (CPU backend): what it
takes from a Llama-style block and what it leaves, with the reasons; the
compiled block against eager (forward and gradients) at dtype-derived bounds;
the registered name, the log, and the options."""
import logging

import pytest

torch = pytest.importorskip("torch")

from tessera import torch_backend, torch_ops  # noqa: E402
from llama_block import Block  # noqa: E402
from torch_util import f64, forward_bound, grad_bound, rel, u  # noqa: E402

nn = torch.nn
F = torch.nn.functional


@pytest.fixture(autouse=True)
def on_daemon(client):
    before = torch_ops.set_client(client)
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    torch_ops.set_client(before)


def inputs(dtype, seed=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 8, 64, generator=g).to(dtype)


TAKEN = {"attention": 1, "matmul": 3, "fused": 2, "gated": 1, "pointwise": 1}
LEFT = {"no region for rms_norm": 2, "no region for view": 3, "no region for transpose": 4,
        "no region for reshape": 1}
# Regions a value of the block passes through, each rounding once.
ROUNDINGS = 8


def test_block_inference_eager_fallback():
    m = Block()
    x = inputs(torch.float32)
    be = torch_backend.make_backend(fallback="eager")
    with torch.no_grad():
        want = Block().double()
        want.load_state_dict(m.state_dict())
        ref = want(x.double())
        got = torch.compile(m, backend=be)(x)
    report = be.reports[-1]
    assert report.counts == TAKEN
    assert report.reasons == LEFT
    kinds = [(k, len(nodes)) for k, nodes, _, _ in report.taken]
    # Compiled ahead: the CPU backend serves every kind by its reference.
    assert {pick for _, _, _, pick in report.taken} == {"reference (tier 0)"}
    # attention; q, k, v; o-proj + residual; the SwiGLU (2 products, silu, mul);
    # w2 + residual; the tail (mul, add, tanh).
    assert kinds == [("attention", 1), ("matmul", 1), ("matmul", 1), ("matmul", 1),
                     ("fused", 2), ("gated", 4), ("fused", 2), ("pointwise", 3)]
    assert got.dtype == torch.float32
    assert rel(got, ref) <= ROUNDINGS * forward_bound(torch.float32, 96)


def test_block_bf16_inductor_matches_eager_within_the_bf16_bound():
    m = Block(tail=False).to(torch.bfloat16)
    x = inputs(torch.bfloat16)
    with torch.no_grad():
        ref64 = Block(tail=False).double()
        ref64.load_state_dict(m.state_dict())
        want = ref64(x.double())
        eager = m(x)
        got = torch.compile(m, backend="tessera")(x)
    report = torch_backend.default.reports[-1]
    assert report.counts == {"attention": 1, "matmul": 3, "fused": 2, "gated": 1}
    assert got.dtype == torch.bfloat16 and got.shape == x.shape
    bound = ROUNDINGS * u(torch.bfloat16)
    assert rel(eager, want) <= bound
    assert rel(got, want) <= bound
    assert rel(got, eager) <= 2 * bound


@pytest.mark.parametrize("fallback", ["eager", "inductor"])
def test_block_training_gradients(fallback):
    """Forward and backward: under inductor, AOTAutograd traces the ops'
    backward (more regions, and torch) through their fake implementations."""
    m = Block()
    x = inputs(torch.float32).requires_grad_(True)
    be = torch_backend.make_backend(fallback=fallback)
    out = torch.compile(m, backend=be)(x)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(9))
    out.backward(g)
    report = be.reports[-1]
    # The tail has no backward region: left to the fallback, with the reason.
    assert report.counts == {"attention": 1, "matmul": 3, "fused": 2, "gated": 1}
    why = "a graph input requires grad and pointwise regions have no backward"
    assert report.reasons[why] == 3
    ref = Block().double()
    ref.load_state_dict(m.state_dict())
    x64 = f64(x)
    ref(x64).backward(g.double())
    assert rel(x.grad, x64.grad) <= ROUNDINGS * grad_bound(torch.float32, 96)
    for (name, p), p64 in zip(m.named_parameters(), ref.parameters()):
        assert rel(p.grad, p64.grad) <= ROUNDINGS * grad_bound(torch.float32, 96), name


def left_reasons(fn, *args):
    be = torch_backend.make_backend(fallback="eager")
    with torch.no_grad():
        out = torch.compile(fn, backend=be)(*args)
    report = be.reports[-1]
    return out, report, sorted((target, reason) for _, target, reason in report.left)


def test_what_is_left_and_why():
    q = torch.randn(1, 2, 4, 8)
    kv = torch.randn(1, 2, 6, 8)
    mask = torch.ones(4, 6, dtype=torch.bool)

    def f(q, kv, mask, x, w3, xi):
        a = F.scaled_dot_product_attention(q, kv, kv, attn_mask=mask)
        c = F.scaled_dot_product_attention(q, kv, kv, is_causal=True)
        g = F.gelu(x)                       # erf form
        bm = x @ w3                         # batched right operand
        return a, c, g, bm, xi + 1

    x = torch.randn(3, 4, 5)
    w3 = torch.randn(3, 5, 2)
    xi = torch.arange(4)
    out, report, left = left_reasons(f, q, kv, mask, x, w3, xi)
    assert report.counts == {}
    assert left == [
        ("add", "int64 (regions take float32, float16, bfloat16)"),
        ("gelu", "gelu with approximate='none' (erf): regions have the tanh form"),
        ("matmul", "the right operand is 3-D (regions take a 2-D right operand)"),
        ("scaled_dot_product_attention", "attn_mask is given (regions take no mask but causal)"),
        ("scaled_dot_product_attention",
         "is_causal with seq_q != seq_k: torch's mask is top-left aligned, the region's "
         "bottom-right"),
    ]
    torch.testing.assert_close(out[0], F.scaled_dot_product_attention(q, kv, kv, attn_mask=mask))


def test_pointwise_chains_and_min_ops():
    def f(x, y, w):
        a = F.gelu(torch.sigmoid(x * y + 2.0), approximate="tanh")  # 4 ops: one region
        b = torch.exp(w)                    # 1 op: left
        return a, b

    x, y, w = torch.randn(4, 8), torch.randn(8), torch.randn(3)
    (a, b), report, left = left_reasons(f, x, y, w)
    assert report.counts == {"pointwise": 1}
    assert left == [("exp", "1 elementwise op (min_pointwise_ops is 2): left to fuse with its "
                            "neighbours")]
    assert rel(a, F.gelu(torch.sigmoid(x.double() * y.double() + 2.0), approximate="tanh")) <= \
        forward_bound(torch.float32, 4)
    assert torch.equal(b, torch.exp(w))
    region = report.taken[0][2]
    assert '"op": "const", "value": 2.0' in region


def test_float64_is_left():
    def f(x, w):
        return x @ w

    x, w = torch.randn(4, 3, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64)
    out, report, left = left_reasons(f, x, w)
    assert torch.equal(out, x @ w)
    assert left == [("matmul", "the left operand is float64 (regions take float32, float16, "
                               "bfloat16)")]


def test_linear_with_bias_and_activation_is_one_fused_region():
    lin = nn.Linear(6, 5)
    x = torch.randn(2, 3, 6)

    def f(x):
        return F.gelu(lin(x), approximate="tanh") + x[..., :5]

    be = torch_backend.make_backend(fallback="eager")
    with torch.no_grad():
        got = torch.compile(f, backend=be)(x)
        want = f(x)
    (kind, nodes, region, pick), = be.reports[-1].taken
    assert kind == "fused"
    assert '"epilogue": ["bias", "gelu"], "residual": true' in region
    assert '"m": 6, "n": 5, "k": 6' in region
    assert rel(got, want) <= forward_bound(torch.float32, 6) * 2


def test_log_lines(caplog):
    be = torch_backend.make_backend(fallback="eager")
    with caplog.at_level(logging.INFO, logger="tessera.compile"), torch.no_grad():
        torch.compile(lambda x, w: torch.relu(x @ w), backend=be)(torch.randn(4, 3),
                                                                   torch.randn(3, 2))
    lines = [r.getMessage() for r in caplog.records if r.name == "tessera.compile"]
    assert lines[-1] == "tessera: took 1 fused; left 0 nodes to the fallback"
    assert lines[0].startswith("tessera: took fused region for ")
    assert lines[0].endswith(" (reference (tier 0))")


def test_options():
    with pytest.raises(ValueError, match="fallback is 'inductor', 'eager' or a backend, got 'x'"):
        torch_backend.Backend(fallback="x")
    be = torch_backend.make_backend(fallback="eager", attention=False, products=False)
    with torch.no_grad():
        torch.compile(lambda x, w: torch.relu(x @ w), backend=be)(torch.randn(4, 3),
                                                                   torch.randn(3, 2))
    assert be.reports[-1].counts == {}


def test_infinite_constants_and_clamp_bounds():
    def f(x):
        return torch.clamp(x * 2.0, min=float("-inf"), max=1.0) + x / float("inf")

    x = torch.tensor([-3.0, -0.25, 0.0, 0.5, 2.0])
    be = torch_backend.make_backend(fallback="eager")
    with torch.no_grad():
        got = torch.compile(f, backend=be)(x)
    (kind, _, region, _), = be.reports[-1].taken
    assert kind == "pointwise"
    assert '"min": "-inf", "max": 1.0' in region and '"value": "inf"' in region
    assert got.tolist() == [-6.0, -0.5, 0.0, 1.0, 1.0]


def test_a_region_the_daemon_refuses_is_left_with_its_error(daemon):
    """Compiled ahead on a client forcing a matmul candidate that does not
    exist: the plain product is left to the fallback with the daemon's
    ARBITER error; the fused one (another kind) is taken."""
    import tessera
    with tessera.connect(daemon.url, force="matmul=no_such") as c:
        be = torch_backend.make_backend(client=c, fallback="eager")
        x, w = torch.randn(4, 3), torch.randn(3, 2)
        with torch.no_grad():
            plain, fused = torch.compile(lambda x, w: (x @ w, torch.relu(x @ w)), backend=be)(x, w)
        report = be.reports[-1]
        assert [(k, nodes) for k, nodes, _, _ in report.taken] == [("fused", ["matmul_1", "relu"])]
        assert [(t, why) for _, t, why in report.left] == [
            ("matmul", "the daemon did not compile it: ARBITER: forced candidate 'no_such' is "
                       "not registered for matmul; registered: reference (tier 0)")]
        assert torch.equal(plain, x @ w)
        assert rel(fused, torch.relu(x.double() @ w.double())) <= forward_bound(torch.float32, 3)


def test_without_compiling_ahead_the_pick_is_empty():
    be = torch_backend.make_backend(fallback="eager", compile_ahead=False)
    with torch.no_grad():
        torch.compile(lambda x, w: x @ w, backend=be)(torch.randn(4, 3), torch.randn(3, 2))
    assert [(k, pick) for k, _, _, pick in be.reports[-1].taken] == [("matmul", "")]


def test_dynamic_shapes_are_left():
    be = torch_backend.make_backend(fallback="eager")
    x, w = torch.randn(4, 3), torch.randn(3, 2)
    with torch.no_grad():
        f = torch.compile(lambda x, w: torch.tanh(torch.relu(x @ w) * 2.0), backend=be,
                          dynamic=True)
        got = f(x, w)
    report = be.reports[-1]
    assert report.counts == {}
    assert [(t, why) for _, t, why in report.left] == [
        ("matmul", "the left operand has a dynamic shape (regions have static shapes)"),
        ("relu", "a dynamic shape (regions have static shapes)"),
        ("mul", "a dynamic shape (regions have static shapes)"),
        ("tanh", "a dynamic shape (regions have static shapes)")]
    assert torch.equal(got, torch.tanh(torch.relu(x @ w) * 2.0))
