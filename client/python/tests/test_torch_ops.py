"""The tessera:: custom ops against torch on a real daemon (CPU backend): each
kind's output and, where the op has a backward, its gradients against torch's
float64 autograd on the same inputs, at bounds derived from the dtype
(torch_util); the checks and their exact statuses and messages; fake tensors,
opcheck, torch.export and torch.compile tracing."""
import json

import pytest

torch = pytest.importorskip("torch")

import tessera  # noqa: E402
from tessera import torch_ops  # noqa: E402
from torch_util import f64, forward_bound, grad_bound, rel, rounded  # noqa: E402

F = torch.nn.functional
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture
def ops(client):
    """The ops running on this module's daemon."""
    before = torch_ops.set_client(client)
    yield torch.ops.tessera
    torch_ops.set_client(before)


def region(**kw):
    return json.dumps(kw)


def expect(code, message, fn, *args):
    with pytest.raises(tessera.TesseraError) as e:
        fn(*args)
    assert e.value.code == code
    assert e.value.message == message


# ---- forward ----

@pytest.mark.parametrize("name", ["f32", "f16", "bf16"])
def test_matmul_forward(ops, name):
    dt = DTYPES[name]
    a, b = rounded((24, 40), dt, 1), rounded((40, 16), dt, 2)
    y = ops.matmul(region(kind="matmul", dtype=name, m=24, n=16, k=40), a, b)
    assert y.dtype == dt and y.shape == (24, 16)
    assert rel(y, a.double() @ b.double()) <= forward_bound(dt, 40)


def test_matmul_out_dtype(ops):
    a, b = rounded((8, 32), torch.bfloat16, 3), rounded((32, 8), torch.bfloat16, 4)
    y = ops.matmul(region(kind="matmul", dtype="bf16", out_dtype="f32", m=8, n=8, k=32), a, b)
    assert y.dtype == torch.float32
    assert rel(y, a.double() @ b.double()) <= forward_bound(torch.float32, 32)


def fused_reference(spec, a, b, bias, residual):
    acts = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "silu": F.silu,
            "gelu": lambda x: F.gelu(x, approximate="tanh"), "exp": torch.exp, "neg": torch.neg,
            "abs": torch.abs, "softplus": F.softplus, "log1p": torch.log1p, "expm1": torch.expm1,
            "reciprocal": torch.reciprocal, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
            "log": torch.log, "sign": torch.sign}
    for op in spec.get("prologue", []):
        a = acts[op](a)
    y = a @ b
    for op in spec.get("epilogue", []):
        y = y + bias if op == "bias" else acts[op](y)
    if residual is not None:
        y = y + residual
    red = spec.get("reduction")
    if red == "rmsnorm":
        y = y / torch.sqrt((y * y).mean(-1, keepdim=True) + spec.get("eps", 1e-6))
    elif red == "softmax":
        y = torch.softmax(y, -1)
    return y


FUSED = [
    {"epilogue": ["bias", "gelu"], "residual": True},
    {"prologue": ["tanh", "silu"], "epilogue": ["relu", "bias", "sigmoid"]},
    {"prologue": ["softplus"], "epilogue": ["silu", "tanh", "bias"], "residual": True},
    {"prologue": ["abs", "sqrt"], "epilogue": ["gelu"]},
    {"prologue": ["expm1", "neg", "exp", "log1p"], "epilogue": ["bias"]},
    {"prologue": ["exp", "rsqrt", "reciprocal", "log"], "epilogue": ["tanh"]},
]


def fused_inputs(spec, dt, m=16, n=24, k=32, grad=False):
    a = rounded((m, k), dt, 10, requires_grad=grad)
    b = rounded((k, n), dt, 11, scale=k ** -0.5, requires_grad=grad)
    bias = rounded((n,), dt, 12, requires_grad=grad) if "bias" in spec.get("epilogue", []) \
        else None
    res = rounded((m, n), dt, 13, requires_grad=grad) if spec.get("residual") else None
    full = dict(kind="fused", dtype={v: k for k, v in DTYPES.items()}[dt], m=m, n=n, k=k, **spec)
    return json.dumps(full), a, b, bias, res


@pytest.mark.parametrize("spec", FUSED, ids=lambda s: "-".join(s.get("prologue", []) +
                                                              s.get("epilogue", [])))
@pytest.mark.parametrize("name", ["f32", "bf16"])
def test_fused_forward(ops, spec, name):
    dt = DTYPES[name]
    text, a, b, bias, res = fused_inputs(spec, dt)
    y = ops.fused(text, a, b, bias, res)
    want = fused_reference(spec, a.double(), b.double(), None if bias is None else bias.double(),
                           None if res is None else res.double())
    assert y.dtype == dt
    assert rel(y, want) <= forward_bound(dt, 32)


def test_fused_reduction_forward(ops):
    spec = {"epilogue": ["bias"], "reduction": "rmsnorm", "eps": 1e-5}
    text, a, b, bias, _ = fused_inputs(spec, torch.float32)
    y = ops.fused(text, a, b, bias, None)
    want = fused_reference(spec, a.double(), b.double(), bias.double(), None)
    assert rel(y, want) <= forward_bound(torch.float32, 32)


@pytest.mark.parametrize("act", ["silu", "gelu", "relu", "sigmoid", "tanh"])
def test_gated_forward(ops, act):
    dt = torch.bfloat16
    a, wg, wu = rounded((16, 32), dt, 20), rounded((32, 24), dt, 21), rounded((32, 24), dt, 22)
    y = ops.gated(region(kind="gated", dtype="bf16", m=16, k=32, h=24, gate_act=act), a, wg, wu)
    f = {"silu": F.silu, "gelu": lambda x: F.gelu(x, approximate="tanh"), "relu": torch.relu,
         "sigmoid": torch.sigmoid, "tanh": torch.tanh}[act]
    a64, wg64, wu64 = a.double(), wg.double(), wu.double()
    assert y.dtype == dt
    assert rel(y, f(a64 @ wg64) * (a64 @ wu64)) <= forward_bound(dt, 32) * 2


def attention_reference(q, k, v, causal, scale=None):
    """torch's SDPA in float64 with the region's bottom-right causal mask."""
    m, n = q.shape[2], k.shape[2]
    mask = None
    if causal:
        rows = torch.arange(m).unsqueeze(1)
        mask = torch.arange(n).unsqueeze(0) <= rows + (n - m)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                          enable_gqa=q.shape[1] != k.shape[1])


@pytest.mark.parametrize("causal,m,n", [(False, 12, 20), (True, 16, 16), (True, 8, 20)])
@pytest.mark.parametrize("name", ["f32", "bf16"])
def test_attention_forward(ops, causal, m, n, name):
    dt = DTYPES[name]
    q, k, v = rounded((2, 4, m, 16), dt, 30), rounded((2, 2, n, 16), dt, 31), \
        rounded((2, 2, n, 8), dt, 32)
    text = region(kind="attention", dtype=name, batch=2, heads=4, heads_kv=2, seq_q=m, seq_k=n,
                  head_dim=16, head_dim_v=8, causal=causal)
    y = ops.attention(text, q, k, v)
    assert y.shape == (2, 4, m, 8) and y.dtype == dt
    assert rel(y, attention_reference(q.double(), k.double(), v.double(), causal)) <= \
        forward_bound(dt, n) * 2


def test_pointwise_forward(ops):
    text = region(kind="pointwise", dtype="f32",
                  inputs=[{"name": "x", "shape": [4, 8]}, {"name": "w", "shape": [8]}],
                  ops=[{"op": "mul", "args": ["x", "w"], "out": "p"},
                       {"op": "gelu", "args": ["p"], "out": "g"},
                       {"op": "clamp", "args": ["g"], "min": -0.25, "max": 1.5, "out": "y"}],
                  output="y")
    x, w = rounded((4, 8), torch.float32, 40), rounded((8,), torch.float32, 41)
    y = ops.pointwise(text, [x, w])
    want = torch.clamp(F.gelu(x.double() * w.double(), approximate="tanh"), -0.25, 1.5)
    assert rel(y, want) <= forward_bound(torch.float32, 4)
    # Exactly representable: relu of small integers.
    r = region(kind="pointwise", dtype="bf16", inputs=[{"name": "x", "shape": [5]}],
               ops=[{"op": "relu", "args": ["x"], "out": "y"}], output="y")
    got = ops.pointwise(r, [torch.tensor([-2.0, -0.0, 0.0, 3.0, 7.0], dtype=torch.bfloat16)])
    assert got.dtype == torch.bfloat16
    assert got.tolist() == [0.0, 0.0, 0.0, 3.0, 7.0]


def test_pointwise_without_inputs(ops):
    r = region(kind="pointwise", dtype="f32", inputs=[],
               ops=[{"op": "const", "value": 2.5, "out": "y"}], output="y")
    y = ops.pointwise(r, [])
    assert y.shape == () and y.item() == 2.5


def test_float64_inputs_round_to_the_region_dtype(ops):
    a = torch.tensor([[1.0 + 2 ** -10, 1.0]], dtype=torch.float64)
    b = torch.tensor([[1.0], [0.0]], dtype=torch.float64)
    y = ops.matmul(region(kind="matmul", dtype="bf16", m=1, n=1, k=2), a, b)
    # 1 + 2^-10 rounds to 1 in bf16 (8 significant bits).
    assert y.dtype == torch.bfloat16 and y.item() == 1.0


# ---- gradients ----

@pytest.mark.parametrize("name", ["f32", "bf16"])
def test_matmul_grad(ops, name):
    dt = DTYPES[name]
    a, b = rounded((12, 40), dt, 50, requires_grad=True), rounded((40, 20), dt, 51,
                                                                  requires_grad=True)
    g = rounded((12, 20), dt, 52)
    ops.matmul(region(kind="matmul", dtype=name, m=12, n=20, k=40), a, b).backward(g)
    a64, b64 = f64(a), f64(b)
    (a64 @ b64).backward(g.double())
    assert a.grad.dtype == dt and b.grad.dtype == dt
    assert rel(a.grad, a64.grad) <= grad_bound(dt, 20)
    assert rel(b.grad, b64.grad) <= grad_bound(dt, 12)


def test_matmul_grad_of_one_input(ops):
    a = rounded((4, 6), torch.float32, 53, requires_grad=True)
    b = rounded((6, 5), torch.float32, 54)
    ops.matmul(region(kind="matmul", dtype="f32", m=4, n=5, k=6), a, b).sum().backward()
    assert b.grad is None
    assert rel(a.grad, torch.ones(4, 5, dtype=torch.float64) @ b.double().t()) <= \
        grad_bound(torch.float32, 5)


@pytest.mark.parametrize("spec", FUSED, ids=lambda s: "-".join(s.get("prologue", []) +
                                                              s.get("epilogue", [])))
@pytest.mark.parametrize("name", ["f32", "bf16"])
def test_fused_grad(ops, spec, name):
    dt = DTYPES[name]
    text, a, b, bias, res = fused_inputs(spec, dt, grad=True)
    g = rounded((16, 24), dt, 14)
    ops.fused(text, a, b, bias, res).backward(g)
    leaves = [t for t in (a, b, bias, res) if t is not None]
    refs = [f64(t) for t in leaves]
    it = iter(refs)
    a64, b64 = next(it), next(it)
    bias64 = next(it) if bias is not None else None
    res64 = next(it) if res is not None else None
    fused_reference(spec, a64, b64, bias64, res64).backward(g.double())
    for t, r in zip(leaves, refs):
        assert t.grad.dtype == dt
        assert rel(t.grad, r.grad) <= grad_bound(dt, 32), (spec, t.shape)


@pytest.mark.parametrize("act", ["silu", "gelu", "tanh"])
@pytest.mark.parametrize("name", ["f32", "bf16"])
def test_gated_grad(ops, act, name):
    dt = DTYPES[name]
    a = rounded((16, 32), dt, 60, requires_grad=True)
    wg = rounded((32, 24), dt, 61, scale=32 ** -0.5, requires_grad=True)
    wu = rounded((32, 24), dt, 62, scale=32 ** -0.5, requires_grad=True)
    g = rounded((16, 24), dt, 63)
    ops.gated(region(kind="gated", dtype=name, m=16, k=32, h=24, gate_act=act), a, wg,
              wu).backward(g)
    f = {"silu": F.silu, "gelu": lambda x: F.gelu(x, approximate="tanh"), "tanh": torch.tanh}[act]
    a64, wg64, wu64 = f64(a), f64(wg), f64(wu)
    (f(a64 @ wg64) * (a64 @ wu64)).backward(g.double())
    for t, r in ((a, a64), (wg, wg64), (wu, wu64)):
        assert t.grad.dtype == dt
        assert rel(t.grad, r.grad) <= grad_bound(dt, 32) * 2


@pytest.mark.parametrize("causal,m,n", [(False, 12, 20), (True, 16, 16), (True, 8, 20)])
@pytest.mark.parametrize("name", ["f32", "bf16"])
def test_attention_grad(ops, causal, m, n, name):
    dt = DTYPES[name]
    q = rounded((2, 4, m, 16), dt, 70, requires_grad=True)
    k = rounded((2, 2, n, 16), dt, 71, requires_grad=True)
    v = rounded((2, 2, n, 8), dt, 72, requires_grad=True)
    g = rounded((2, 4, m, 8), dt, 73)
    text = region(kind="attention", dtype=name, batch=2, heads=4, heads_kv=2, seq_q=m, seq_k=n,
                  head_dim=16, head_dim_v=8, causal=causal, scale=0.3)
    ops.attention(text, q, k, v).backward(g)
    q64, k64, v64 = f64(q), f64(k), f64(v)
    attention_reference(q64, k64, v64, causal, scale=0.3).backward(g.double())
    for t, r in ((q, q64), (k, k64), (v, v64)):
        assert t.grad.dtype == dt
        assert rel(t.grad, r.grad) <= grad_bound(dt, n), (t.shape,)


def test_pointwise_refuses_grad(ops):
    text = region(kind="pointwise", dtype="f32", inputs=[{"name": "x", "shape": [3]}],
                  ops=[{"op": "exp", "args": ["x"], "out": "y"}], output="y")
    x = torch.zeros(3, requires_grad=True)
    expect(tessera.Status.UNSUPPORTED,
           "tessera::pointwise has no backward (pointwise regions are forward only): run it "
           "under torch.no_grad() or on tensors that do not require grad",
           ops.pointwise, text, [x])
    with torch.no_grad():
        assert ops.pointwise(text, [x]).tolist() == [1.0, 1.0, 1.0]
    assert ops.pointwise(text, [x.detach()]).tolist() == [1.0, 1.0, 1.0]


def test_fused_reduction_refuses_grad(ops):
    spec = {"epilogue": ["bias"], "reduction": "softmax"}
    text, a, b, bias, _ = fused_inputs(spec, torch.float32, grad=True)
    expect(tessera.Status.UNSUPPORTED,
           "tessera::fused has no backward (the region has the row reduction 'softmax'): run it "
           "under torch.no_grad() or on tensors that do not require grad",
           ops.fused, text, a, b, bias, None)


# ---- checks ----

MM = region(kind="matmul", dtype="f32", m=4, n=3, k=2)


def test_bad_region(ops):
    a, b = torch.zeros(4, 2), torch.zeros(2, 3)
    expect(tessera.Status.BAD_ATTRIBUTE, "dtype: missing", ops.matmul, '{"kind": "matmul"}',
           a, b)
    expect(tessera.Status.BAD_DIMENSION, "m: must be > 0 (got 0)", ops.matmul,
           region(kind="matmul", dtype="f32", m=0, n=3, k=2), a, b)
    expect(tessera.Status.BAD_JSON, "region: malformed or truncated JSON near byte 0",
           ops.matmul, "nope", a, b)


def test_wrong_kind(ops):
    expect(tessera.Status.INVALID_ARGUMENT, "tessera::gated: the region's kind is 'matmul'",
           ops.gated, MM, torch.zeros(4, 2), torch.zeros(2, 3), torch.zeros(2, 3))


def test_wrong_tensors(ops):
    text = region(kind="fused", dtype="f32", m=4, n=3, k=2, epilogue=["bias"], residual=True)
    a, b = torch.zeros(4, 2), torch.zeros(2, 3)
    expect(tessera.Status.INVALID_ARGUMENT,
           "tessera::fused: the region reads a, b, bias, residual, given a, b, residual",
           ops.fused, text, a, b, None, torch.zeros(4, 3))
    pw = region(kind="pointwise", dtype="f32", inputs=[{"name": "x", "shape": [2]}],
                ops=[], output="x")
    expect(tessera.Status.INVALID_ARGUMENT,
           "tessera::pointwise: the region reads x, given x, input 1",
           ops.pointwise, pw, [torch.zeros(2), torch.zeros(2)])


def test_shape_and_dtype_checks(ops):
    expect(tessera.Status.BUFFER_MISMATCH, "a: shape (2,4), expected (4,2)", ops.matmul, MM,
           torch.zeros(2, 4), torch.zeros(2, 3))
    expect(tessera.Status.BAD_ATTRIBUTE,
           "b: element type 'int64' unsupported (need float32, float16, bfloat16, float64)",
           ops.matmul, MM, torch.zeros(4, 2), torch.zeros(2, 3, dtype=torch.int64))


def test_checks_hold_under_fake_tensors(client):
    """The fake implementations check what the real ones check and give the
    output's shape and dtype; no daemon is needed to trace."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    before = torch_ops.set_client(tessera.connect("ipc:///nonexistent/tesserad.sock", lazy=True))
    try:
        with FakeTensorMode():
            a, b = torch.empty(4, 2, dtype=torch.bfloat16), torch.empty(2, 3,
                                                                       dtype=torch.bfloat16)
            y = torch.ops.tessera.matmul(
                region(kind="matmul", dtype="bf16", out_dtype="f32", m=4, n=3, k=2), a, b)
            assert y.shape == (4, 3) and y.dtype == torch.float32
            expect(tessera.Status.BUFFER_MISMATCH, "a: shape (2,4), expected (4,2)",
                   torch.ops.tessera.matmul, MM, torch.empty(2, 4), torch.empty(2, 3))
            q = torch.empty(1, 4, 8, 16)
            kv = torch.empty(1, 2, 8, 16)
            y = torch.ops.tessera.attention(region(kind="attention", dtype="f32", batch=1,
                                                   heads=4, heads_kv=2, seq_q=8, seq_k=8,
                                                   head_dim=16), q, kv, kv)
            assert y.shape == (1, 4, 8, 16)
    finally:
        torch_ops.set_client(before)


@pytest.mark.parametrize("op,args", [
    ("matmul", lambda: (MM, torch.randn(4, 2, requires_grad=True),
                        torch.randn(2, 3, requires_grad=True))),
    ("fused", lambda: (region(kind="fused", dtype="f32", m=4, n=3, k=2, epilogue=["bias", "silu"]),
                       torch.randn(4, 2, requires_grad=True), torch.randn(2, 3),
                       torch.randn(3, requires_grad=True), None)),
    ("gated", lambda: (region(kind="gated", dtype="f32", m=4, k=2, h=3), torch.randn(4, 2),
                       torch.randn(2, 3, requires_grad=True), torch.randn(2, 3))),
    ("attention", lambda: (region(kind="attention", dtype="f32", batch=1, heads=2, seq_q=3,
                                  seq_k=5, head_dim=4), torch.randn(1, 2, 3, 4),
                           torch.randn(1, 2, 5, 4, requires_grad=True), torch.randn(1, 2, 5, 4))),
    ("pointwise", lambda: (region(kind="pointwise", dtype="f32",
                                  inputs=[{"name": "x", "shape": [3]}],
                                  ops=[{"op": "tanh", "args": ["x"], "out": "y"}], output="y"),
                           [torch.randn(3)])),
])
def test_opcheck(ops, op, args):
    """torch's own checks of a custom op: schema, autograd registration, fake
    tensors against the real op, and AOT dispatch."""
    result = torch.library.opcheck(getattr(torch.ops.tessera, op).default, args())
    assert set(result.values()) == {"SUCCESS"}, result


def test_export_and_compile(ops):
    class Model(torch.nn.Module):
        def forward(self, a, b):
            return torch.ops.tessera.matmul(MM, a, b) * 2

    a, b = rounded((4, 2), torch.float32, 80), rounded((2, 3), torch.float32, 81)
    ep = torch.export.export(Model(), (a, b))
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert targets == [torch.ops.tessera.matmul.default, torch.ops.aten.mul.Tensor]
    want = (a.double() @ b.double()) * 2
    assert rel(ep.module()(a, b), want) <= forward_bound(torch.float32, 2)

    def f(a, b):
        return torch.ops.tessera.matmul(MM, torch.tanh(a), b).sum()

    a.requires_grad_(True)
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    compiled(a, b).backward()
    a64 = f64(a)
    (torch.tanh(a64) @ b.double()).sum().backward()
    assert rel(a.grad, a64.grad) <= grad_bound(torch.float32, 3)
