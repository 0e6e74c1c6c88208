"""torch.library custom ops for tesserad regions, with autograd.

Importing this module registers five operators in the ``tessera`` namespace,
one per region kind. Each takes the region as JSON text (``Region.json``, or
any JSON text tessera.Region accepts) and the region's tensors in signature
order, runs the region on the daemon (tessera.torch_support: CPU tensors as
numpy data, CUDA tensors by CUDA IPC) and returns a new tensor:

    torch.ops.tessera.matmul(region, a, b)
    torch.ops.tessera.fused(region, a, b, bias, residual)   # bias/residual: Tensor or None
    torch.ops.tessera.gated(region, a, wg, wu)
    torch.ops.tessera.attention(region, q, k, v)
    torch.ops.tessera.pointwise(region, [x, y, ...])

Every op has a fake (meta) implementation that checks the same things as the
real one and returns an empty tensor of the region's output shape and dtype,
so the ops trace under torch.compile and torch.export without a daemon.
Checks, in order: the region parses (its own status), its kind is the op's
(INVALID_ARGUMENT), the tensors given match what the region reads
(INVALID_ARGUMENT), then each tensor's element type (BAD_ATTRIBUTE) and exact
shape (BUFFER_MISMATCH), as tessera.Client.run checks numpy inputs.

Autograd: matmul, fused without a reduction, gated and attention have a
backward; pointwise and fused with a reduction raise UNSUPPORTED when called
with grad enabled on a tensor that requires grad. The backward of matmul,
fused and gated runs as further regions on the daemon (matmul regions for the
products, pointwise regions for the derivatives of prologue, epilogue and
gate activations, with f32 outputs); the bias gradient is a torch sum over
rows. The attention backward is torch arithmetic in float32 (it recomputes
the probabilities: memory of B·H·M·N floats). Gradients come back in each
input's own dtype.

The ops run on the client set with set_client(), else tessera.default_client()
($TESSERA_URL). Compile options other than the defaults go through the
client's force setting ($TESSERA_FORCE).
"""
import functools
import json
import math
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

import tessera
from tessera import torch_support

__all__ = ["set_client", "get_client", "matmul_region", "region_text", "chain_derivative",
           "attention_probabilities"]

Tensor = torch.Tensor

_state: Dict[str, Optional[tessera.Client]] = {"client": None}
_state_lock = threading.Lock()


def set_client(client: Optional[tessera.Client]) -> Optional[tessera.Client]:
    """Makes the ops run on client (None: back to tessera.default_client());
    returns the client set before."""
    with _state_lock:
        before = _state["client"]
        _state["client"] = client
        return before


def get_client() -> tessera.Client:
    """The client the ops run on."""
    with _state_lock:
        c = _state["client"]
    return c if c is not None else tessera.default_client()


@functools.lru_cache(maxsize=512)
def _region(text: str) -> tessera.Region:
    """The parsed region of JSON text, kept: the ops receive the text on every
    call, and parsing is the C library's."""
    return tessera.Region(text)


def region_text(region: "tessera.RegionLike") -> str:
    """JSON text for a region given as a tessera.Region, a dict or text."""
    if isinstance(region, tessera.Region):
        return region.json
    if isinstance(region, (str, bytes)):
        return region.decode() if isinstance(region, bytes) else region
    return json.dumps(dict(region), sort_keys=True)


def _err(code: tessera.Status, msg: str) -> tessera.TesseraError:
    return tessera.TesseraError(code, msg)


def _prepare(op: str, text: str, tensors: Sequence[Optional[Tensor]],
             names: Sequence[str]) -> Tuple[tessera.Region, List[Tensor]]:
    """The region and the tensors it reads, in signature order, after the
    checks the module docstring lists. names: the op's argument names, in the
    order tensors are given; None stands for an optional one left out."""
    r = _region(text)
    if r.kind != op:
        raise _err(tessera.Status.INVALID_ARGUMENT, "tessera::%s: the region's kind is '%s'"
                   % (op, r.kind))
    reads = [s.name for s in r.inputs]
    given = [n for n, t in zip(names, tensors) if t is not None]
    if given != reads:
        raise _err(tessera.Status.INVALID_ARGUMENT, "tessera::%s: the region reads %s, given %s"
                   % (op, ", ".join(reads) or "nothing", ", ".join(given) or "nothing"))
    ts = [t for t in tensors if t is not None]
    for t, spec in zip(ts, r.inputs):
        torch_support._check(torch, t, spec)
    return r, ts


def _out_dtype(r: tessera.Region) -> torch.dtype:
    return torch_support._torch_dtype(torch, r.output.dtype)


def _run(r: tessera.Region, ts: List[Tensor]) -> Tensor:
    if not ts:
        # A pointwise region without inputs: a CPU result.
        y = get_client().run(r, [])
        return torch.from_numpy(y).to(_out_dtype(r))
    return get_client().run(r, ts)


def _fake(r: tessera.Region, ts: List[Tensor]) -> Tensor:
    device = ts[0].device if ts else torch.device("cpu")
    return torch.empty(r.output.shape, dtype=_out_dtype(r), device=device)


# ---- the ops ----

def _op(kind: str, names: Sequence[str], optional: Sequence[str] = ()) -> Any:
    """Registers tessera::KIND, which takes the region's text and one tensor a
    name (a "Tensor?" for each name in optional, which may be None), and its
    fake; both check the tensors with _prepare, one runs the region and the
    other makes its empty output."""
    args = ", ".join("Tensor%s %s" % ("?" if n in optional else "", n) for n in names)

    def run(region: str, *tensors: Optional[Tensor]) -> Tensor:
        return _run(*_prepare(kind, region, list(tensors), names))

    def fake(region: str, *tensors: Optional[Tensor]) -> Tensor:
        return _fake(*_prepare(kind, region, list(tensors), names))

    op = torch.library.custom_op("tessera::" + kind, run, mutates_args=(),
                                 schema="(str region, %s) -> Tensor" % args)
    op.register_fake(fake)
    return op


_matmul = _op("matmul", ["a", "b"])
_fused = _op("fused", ["a", "b", "bias", "residual"], optional=["bias", "residual"])
_gated = _op("gated", ["a", "wg", "wu"])
_attention = _op("attention", ["q", "k", "v"])


def _pointwise_names(region: str, n: int) -> List[str]:
    """The pointwise region's input names, so a wrong count names them all."""
    names = [s.name for s in _region(region).inputs]
    return names[:n] + ["input %d" % i for i in range(len(names), n)]


@torch.library.custom_op("tessera::pointwise", mutates_args=(),
                         schema="(str region, Tensor[] inputs) -> Tensor")
def _pointwise(region: str, inputs: List[Tensor]) -> Tensor:
    return _run(*_prepare("pointwise", region, inputs, _pointwise_names(region, len(inputs))))


@_pointwise.register_fake
def _pointwise_fake(region: str, inputs: List[Tensor]) -> Tensor:
    return _fake(*_prepare("pointwise", region, inputs, _pointwise_names(region, len(inputs))))


# ---- backward regions ----

def matmul_region(dtype: str, m: int, n: int, k: int, out_dtype: str = "f32") -> str:
    """JSON text of a matmul region (M, K)·(K, N); gradients use an f32
    output and are cast to the input's dtype afterwards."""
    return json.dumps({"kind": "matmul", "dtype": dtype, "out_dtype": out_dtype, "m": m, "n": n,
                       "k": k})


def _mm(dtype: str, x: Tensor, y: Tensor) -> Tensor:
    """x·y through a matmul region (both made dense row-major first)."""
    return torch.ops.tessera.matmul(matmul_region(dtype, x.shape[0], y.shape[1], x.shape[1]),
                                    x.contiguous(), y.contiguous())


class _Dag:
    """A pointwise region under construction: inputs, then ops, one output."""

    def __init__(self) -> None:
        self.inputs: List[Dict[str, Any]] = []
        self.ops: List[Dict[str, Any]] = []

    def input(self, name: str, shape: Sequence[int]) -> str:
        self.inputs.append({"name": name, "shape": list(shape)})
        return name

    def op(self, op: str, *args: str) -> str:
        out = "t%d" % len(self.ops)
        self.ops.append({"op": op, "args": list(args), "out": out})
        return out

    def const(self, value: float) -> str:
        out = "t%d" % len(self.ops)
        self.ops.append({"op": "const", "value": value, "out": out})
        return out

    def region(self, output: str, dtype: str = "f32") -> str:
        return json.dumps({"kind": "pointwise", "dtype": dtype, "inputs": self.inputs,
                           "ops": self.ops, "output": output})


_GELU_C = 0.7978845608028654
_GELU_K = 0.044715


def _derivative(d: _Dag, op: str, x: str, y: str) -> str:
    """The derivative of unary op at x (y = op(x)), as a value of d."""
    if op == "neg":
        return d.const(-1.0)
    if op == "abs":
        return d.op("sign", x)
    if op in ("exp",):
        return y
    if op == "log":
        return d.op("reciprocal", x)
    if op == "sqrt":
        return d.op("mul", d.op("reciprocal", y), d.const(0.5))
    if op == "rsqrt":
        return d.op("mul", d.op("mul", d.op("mul", y, y), y), d.const(-0.5))
    if op == "log1p":
        return d.op("reciprocal", d.op("add", x, d.const(1.0)))
    if op == "expm1":
        return d.op("add", y, d.const(1.0))
    if op == "reciprocal":
        return d.op("neg", d.op("mul", y, y))
    if op == "relu":
        return d.op("relu", d.op("sign", x))
    if op == "sigmoid":
        return d.op("mul", y, d.op("sub", d.const(1.0), y))
    if op == "tanh":
        return d.op("sub", d.const(1.0), d.op("mul", y, y))
    if op == "silu":
        s = d.op("sigmoid", x)
        return d.op("mul", s, d.op("add", d.const(1.0),
                                   d.op("mul", x, d.op("sub", d.const(1.0), s))))
    if op == "softplus":
        return d.op("sigmoid", x)
    if op == "sign":
        return d.const(0.0)
    if op == "gelu":
        x2 = d.op("mul", x, x)
        u = d.op("mul", d.op("add", x, d.op("mul", d.op("mul", x2, x), d.const(_GELU_K))),
                 d.const(_GELU_C))
        t = d.op("tanh", u)
        left = d.op("mul", d.op("add", t, d.const(1.0)), d.const(0.5))
        dt = d.op("sub", d.const(1.0), d.op("mul", t, t))
        du = d.op("mul", d.op("add", d.op("mul", x2, d.const(3 * _GELU_K)), d.const(1.0)),
                  d.const(_GELU_C))
        return d.op("add", left, d.op("mul", d.op("mul", d.op("mul", x, dt), du),
                                      d.const(0.5)))
    raise _err(tessera.Status.UNSUPPORTED, "no derivative for op '%s'" % op)


def chain_derivative(ops: Sequence[str], shape: Sequence[int],
                     bias_shape: Optional[Sequence[int]] = None, from_op: int = 0,
                     factors: Sequence[str] = ()) -> str:
    """JSON text of a pointwise f32 region that back-propagates g through a
    chain of unary ops applied to x in order ("bias" adds the input bias):
    g · ∏ opᵢ'(vᵢ) over the ops from index from_op on, where vᵢ is the chain's
    value entering op i. Inputs: x, g, then bias when the chain has one, then
    each name of factors (more tensors of x's shape multiplied into g)."""
    d = _Dag()
    v = d.input("x", shape)
    acc = d.input("g", shape)
    bias = d.input("bias", bias_shape) if bias_shape is not None else None
    for f in factors:
        acc = d.op("mul", acc, d.input(f, shape))
    for i, op in enumerate(ops):
        if op == "bias":
            assert bias is not None
            v = d.op("add", v, bias)
            continue
        y = d.op(op, v)
        if i >= from_op:
            acc = d.op("mul", acc, _derivative(d, op, v, y))
        v = y
    return d.region(acc)


def _apply_chain(ops: Sequence[str], shape: Sequence[int], factors: Sequence[str] = ()) -> str:
    """JSON text of a pointwise f32 region computing the chain of unary ops on
    x, times each of factors."""
    d = _Dag()
    v = d.input("x", shape)
    for op in ops:
        v = d.op(op, v)
    for f in factors:
        v = d.op("mul", v, d.input(f, shape))
    return d.region(v)


def _pw(text: str, *inputs: Tensor) -> Tensor:
    return torch.ops.tessera.pointwise(text, [t.float() for t in inputs])


def _grad_of(t: Tensor, g: Optional[Tensor]) -> Optional[Tensor]:
    return None if g is None else g.to(t.dtype)


def _no_backward(op: str, why: str) -> tessera.TesseraError:
    return _err(tessera.Status.UNSUPPORTED,
                "tessera::%s has no backward (%s): run it under torch.no_grad() or on tensors that "
                "do not require grad" % (op, why))


# matmul

def _matmul_setup(ctx: Any, inputs: Tuple[Any, ...], output: Tensor) -> None:
    region, a, b = inputs
    ctx.dtype = _region(region).inputs[0].dtype
    ctx.save_for_backward(a, b)


def _matmul_backward(ctx: Any, g: Tensor) -> Tuple[None, Optional[Tensor], Optional[Tensor]]:
    a, b = ctx.saved_tensors
    da = _mm(ctx.dtype, g, b.t()) if ctx.needs_input_grad[1] else None
    db = _mm(ctx.dtype, a.t(), g) if ctx.needs_input_grad[2] else None
    return None, _grad_of(a, da), _grad_of(b, db)


torch.library.register_autograd("tessera::matmul", _matmul_backward, setup_context=_matmul_setup)


# fused

def _fused_setup(ctx: Any, inputs: Tuple[Any, ...], output: Tensor) -> None:
    region, a, b, bias, residual = inputs
    spec = json.loads(_region(region).json)
    if spec.get("reduction") not in (None, "none"):
        raise _no_backward("fused", "the region has the row reduction '%s'" % spec["reduction"])
    ctx.dtype = _region(region).inputs[0].dtype
    ctx.prologue = list(spec.get("prologue", []))
    ctx.epilogue = list(spec.get("epilogue", []))
    ctx.has_bias = bias is not None
    ctx.has_residual = residual is not None
    ctx.residual_dtype = residual.dtype if residual is not None else None
    ctx.save_for_backward(a, b, bias if bias is not None else a.new_empty(0))


def _fused_backward(ctx: Any, g: Tensor) -> Tuple[Optional[Tensor], ...]:
    a, b, bias = ctx.saved_tensors
    m, n = g.shape
    need_a, need_b, need_bias, need_res = ctx.needs_input_grad[1:5]
    # The prologue's output, and the accumulator entering the epilogue (f32).
    pa = _pw(_apply_chain(ctx.prologue, a.shape), a) if ctx.prologue else a
    z = _mm(ctx.dtype, pa, b)
    bias_shape = [n] if ctx.has_bias else None
    extra = [bias] if ctx.has_bias else []
    dz = _pw(chain_derivative(ctx.epilogue, (m, n), bias_shape), z, g, *extra) \
        if ctx.epilogue else g
    da = db = dbias = None
    if need_a:
        da = _mm(ctx.dtype, dz, b.t())
        if ctx.prologue:
            da = _pw(chain_derivative(ctx.prologue, a.shape), a, da)
    if need_b:
        db = _mm(ctx.dtype, pa.t(), dz)
    if need_bias and ctx.has_bias:
        at = ctx.epilogue.index("bias")
        # The gradient at the bias's place: g times the derivatives of the ops
        # after it.
        if at == 0:
            gb = dz
        elif at == len(ctx.epilogue) - 1:
            gb = g
        else:
            gb = _pw(chain_derivative(ctx.epilogue, (m, n), bias_shape, from_op=at + 1), z, g,
                     bias)
        dbias = gb.float().sum(0).to(bias.dtype)
    dres = g.to(ctx.residual_dtype) if need_res and ctx.has_residual else None
    return None, _grad_of(a, da), _grad_of(b, db), dbias, dres


torch.library.register_autograd("tessera::fused", _fused_backward, setup_context=_fused_setup)


# gated

def _gated_setup(ctx: Any, inputs: Tuple[Any, ...], output: Tensor) -> None:
    region, a, wg, wu = inputs
    spec = json.loads(_region(region).json)
    ctx.dtype = _region(region).inputs[0].dtype
    ctx.act = spec.get("gate_act", "silu")
    ctx.save_for_backward(a, wg, wu)


def _gated_backward(ctx: Any, g: Tensor) -> Tuple[Optional[Tensor], ...]:
    a, wg, wu = ctx.saved_tensors
    gate = _mm(ctx.dtype, a, wg)
    up = _mm(ctx.dtype, a, wu)
    shape = gate.shape
    # out = act(G) ⊙ U: dU = g ⊙ act(G), dG = g ⊙ U ⊙ act'(G).
    du = _pw(_apply_chain([ctx.act], shape, ["g"]), gate, g)
    dg = _pw(chain_derivative([ctx.act], shape, factors=["u"]), gate, g, up)
    da = dwg = dwu = None
    if ctx.needs_input_grad[1]:
        da = _mm(ctx.dtype, dg, wg.t()) + _mm(ctx.dtype, du, wu.t())
    if ctx.needs_input_grad[2]:
        dwg = _mm(ctx.dtype, a.t(), dg)
    if ctx.needs_input_grad[3]:
        dwu = _mm(ctx.dtype, a.t(), du)
    return None, _grad_of(a, da), _grad_of(wg, dwg), _grad_of(wu, dwu)


torch.library.register_autograd("tessera::gated", _gated_backward, setup_context=_gated_setup)


# attention

def _attention_setup(ctx: Any, inputs: Tuple[Any, ...], output: Tensor) -> None:
    region, q, k, v = inputs
    spec = json.loads(_region(region).json)
    # The region's default scale, as validation fills it in.
    ctx.scale = float(spec.get("scale", 1.0 / math.sqrt(spec["head_dim"])))
    ctx.causal = bool(spec.get("causal", False))
    ctx.save_for_backward(q, k, v)


def attention_probabilities(q: Tensor, k: Tensor, scale: float, causal: bool) -> Tensor:
    """softmax(scale·Q·Kᵀ) in float32 with the region's bottom-right causal
    mask, k already expanded to q's heads; a fully masked row is all zeros (the
    region writes 0 there)."""
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if causal:
        m, n = s.shape[-2], s.shape[-1]
        rows = torch.arange(m, device=s.device).unsqueeze(1)
        cols = torch.arange(n, device=s.device).unsqueeze(0)
        s = s.masked_fill(cols > rows + (n - m), float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.nan_to_num(p, nan=0.0)


def _attention_backward(ctx: Any, g: Tensor) -> Tuple[Optional[Tensor], ...]:
    q, k, v = ctx.saved_tensors
    groups = q.shape[1] // k.shape[1]
    ke = k.float().repeat_interleave(groups, dim=1)
    ve = v.float().repeat_interleave(groups, dim=1)
    p = attention_probabilities(q, ke, ctx.scale, ctx.causal)
    go = g.float()
    dp = torch.matmul(go, ve.transpose(-1, -2))
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    dq = torch.matmul(ds, ke) * ctx.scale
    b, hkv, n = k.shape[0], k.shape[1], k.shape[2]
    dk = (torch.matmul(ds.transpose(-1, -2), q.float()) * ctx.scale).view(
        b, hkv, groups, n, k.shape[3]).sum(2)
    dv = torch.matmul(p.transpose(-1, -2), go).view(b, hkv, groups, n, v.shape[3]).sum(2)
    return None, dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


torch.library.register_autograd("tessera::attention", _attention_backward,
                                setup_context=_attention_setup)


# pointwise: no backward

def _pointwise_setup(ctx: Any, inputs: Tuple[Any, ...], output: Tensor) -> None:
    raise _no_backward("pointwise", "pointwise regions are forward only")


def _pointwise_backward(ctx: Any, g: Tensor) -> Tuple[None, None]:
    raise _no_backward("pointwise", "pointwise regions are forward only")


torch.library.register_autograd("tessera::pointwise", _pointwise_backward,
                                setup_context=_pointwise_setup)
