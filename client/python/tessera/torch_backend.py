"""The torch.compile backend "tessera".

    import tessera.torch_backend            # registers the backend
    model = torch.compile(model, backend="tessera")

(An installed package registers it through the torch_dynamo_backends entry
point too, so backend="tessera" works without the import.)

The backend gets the FX graph dynamo captured, replaces the subgraphs tesserad
serves with calls to the tessera custom ops (tessera.torch_ops), and hands the
rewritten graph to inductor (or to the fallback chosen with make_backend), which
compiles everything left and treats the ops as opaque calls. What it maps:

- a matrix product (`x @ w`, torch.matmul, torch.mm, F.linear) whose right
  operand is 2-D, with x flattened to (M, K): a `matmul` region, or a `fused`
  region when its single-user chain continues with a bias (F.linear's, or an
  add of an (N,) tensor), then any of relu, sigmoid, tanh, silu, gelu with
  approximate="tanh", then an add of a tensor of the product's shape (the
  residual);
- act(x·Wg) ⊙ (x·Wu) for act in relu, sigmoid, tanh, silu, tanh-gelu, both
  products on the same x without bias: a `gated` region (SwiGLU);
- F.scaled_dot_product_attention with no mask and no dropout, 4-D q, k, v
  (GQA through enable_gqa): an `attention` region;
- connected elementwise ops (add, sub, mul, div, pow, maximum, minimum, neg,
  abs, exp, log, sqrt, rsqrt, log1p, expm1, reciprocal, relu, sigmoid, tanh,
  silu, softplus, sign, tanh-gelu, clamp; Python numbers become constants)
  whose values are used only inside the group but for one: a `pointwise`
  region, when it has at least min_pointwise_ops ops.

Everything else stays in the graph. Each decision is logged on the
"tessera.compile" logger (INFO, one line per region taken, one per node left
with the reason) and kept in a Report (Backend.reports; the registered backend
is tessera.torch_backend.default), with counts per region kind and per reason.
Shapes must be static (a dynamic dimension leaves the node, with that reason),
the tensors of a region must share one dtype of float32, float16 or bfloat16,
and when a graph input requires grad, regions without a backward (pointwise)
are not formed.
"""
import json
import logging
import math
import operator
import threading
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Set, Tuple

import torch
import torch.fx as fx

import tessera
from tessera import torch_ops

__all__ = ["Backend", "Report", "make_backend", "default", "tessera_backend"]

log = logging.getLogger("tessera.compile")
F = torch.nn.functional

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_UNARY = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "log1p", "expm1", "reciprocal", "relu",
          "sigmoid", "tanh", "silu", "softplus", "sign", "gelu")
_BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")
_EPILOGUE_ACTS = ("relu", "gelu", "silu", "sigmoid", "tanh")

# call_function targets and call_method names, by what they compute.
_FUNCTIONS: Dict[Any, str] = {
    operator.add: "add", torch.add: "add", operator.sub: "sub", torch.sub: "sub",
    operator.mul: "mul", torch.mul: "mul", operator.truediv: "div", torch.div: "div",
    operator.pow: "pow", torch.pow: "pow", torch.maximum: "maximum",
    torch.minimum: "minimum", operator.neg: "neg", torch.neg: "neg", torch.abs: "abs",
    operator.abs: "abs", torch.exp: "exp", torch.log: "log", torch.sqrt: "sqrt",
    torch.rsqrt: "rsqrt", torch.log1p: "log1p", torch.expm1: "expm1",
    torch.reciprocal: "reciprocal", torch.relu: "relu", F.relu: "relu",
    torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh", F.tanh: "tanh",
    F.silu: "silu", F.softplus: "softplus", torch.sign: "sign", F.gelu: "gelu",
    torch.clamp: "clamp", torch.clip: "clamp",
    operator.matmul: "matmul", torch.matmul: "matmul", torch.mm: "matmul", F.linear: "linear",
    F.scaled_dot_product_attention: "sdpa",
}
_METHODS = {name: name for name in _UNARY + _BINARY + ("clamp", "matmul")}
_METHODS.update({"clip": "clamp", "__add__": "add", "__mul__": "mul", "__sub__": "sub",
                 "__truediv__": "div", "__matmul__": "matmul", "mm": "matmul"})


@dataclass
class Report:
    """What the backend did with one graph: taken lists (region kind, the FX
    nodes it replaced, the region's JSON, the daemon's pick as "candidate
    (tier N)", or "" when not compiled ahead), left lists (node, target, reason)
    for each call it kept, counts the regions per kind and reasons counts the
    nodes left per reason."""

    taken: List[Tuple[str, List[str], str, str]] = field(default_factory=list)
    left: List[Tuple[str, str, str]] = field(default_factory=list)

    @property
    def counts(self) -> Dict[str, int]:
        """Regions taken, per kind."""
        return dict(Counter(t[0] for t in self.taken))

    @property
    def reasons(self) -> Dict[str, int]:
        """Nodes left, per reason."""
        return dict(Counter(reason for _, _, reason in self.left))

    def summary(self) -> str:
        """One line: regions per kind, and nodes left."""
        taken = ", ".join("%d %s" % (n, k) for k, n in sorted(self.counts.items())) or "nothing"
        return "tessera: took %s; left %d node%s to the fallback" % (
            taken, len(self.left), "" if len(self.left) == 1 else "s")


def _target_name(node: fx.Node) -> str:
    t = node.target
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


def _classify(node: fx.Node) -> Optional[str]:
    if node.op == "call_function":
        try:
            return _FUNCTIONS.get(node.target)
        except TypeError:  # an unhashable target
            return None
    if node.op == "call_method":
        return _METHODS.get(str(node.target))
    return None


def _val(x: Any) -> Optional[torch.Tensor]:
    """The example (fake) tensor dynamo recorded for a node, or None."""
    if isinstance(x, fx.Node):
        v = x.meta.get("example_value", x.meta.get("val"))
        if isinstance(v, torch.Tensor):
            return v
    return None


def _static(shape: Sequence[Any]) -> bool:
    return all(type(d) is int for d in shape)


class _Skip(Exception):
    """A pattern does not apply; the message is the reason."""


def _tensor(x: Any, what: str) -> torch.Tensor:
    v = _val(x)
    if v is None:
        raise _Skip("%s is not a tensor of the graph" % what)
    if not _static(v.shape):
        raise _Skip("%s has a dynamic shape (regions have static shapes)" % what)
    if v.dtype not in _DTYPES:
        raise _Skip("%s is %s (regions take float32, float16, bfloat16)"
                    % (what, str(v.dtype).replace("torch.", "")))
    return v


# ---- the helpers the rewritten graph calls (traced through by the fallback) ----

def _run_product(region: str, x: torch.Tensor, w: torch.Tensor, bias: Optional[torch.Tensor],
                 residual: Optional[torch.Tensor], transpose_w: bool,
                 out_shape: Tuple[int, ...]) -> torch.Tensor:
    """A matmul or fused region on x flattened to (M, K) and w (or wᵀ)."""
    a = x.reshape(-1, x.shape[-1])
    b = w.t() if transpose_w else w
    if bias is None and residual is None and json.loads(region)["kind"] == "matmul":
        y = torch.ops.tessera.matmul(region, a, b.contiguous())
    else:
        res = None if residual is None else residual.reshape(a.shape[0], -1)
        y = torch.ops.tessera.fused(region, a, b.contiguous(), bias, res)
    return y.reshape(out_shape)


def _run_gated(region: str, x: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor,
               transpose_w: bool, out_shape: Tuple[int, ...]) -> torch.Tensor:
    a = x.reshape(-1, x.shape[-1])
    if transpose_w:
        wg, wu = wg.t(), wu.t()
    return torch.ops.tessera.gated(region, a, wg.contiguous(), wu.contiguous()).reshape(out_shape)


def _run_attention(region: str, q: torch.Tensor, k: torch.Tensor,
                   v: torch.Tensor) -> torch.Tensor:
    return torch.ops.tessera.attention(region, q, k, v)


def _run_pointwise(region: str, *inputs: torch.Tensor) -> torch.Tensor:
    return torch.ops.tessera.pointwise(region, list(inputs))


_HELPERS = (_run_product, _run_gated, _run_attention, _run_pointwise)


# ---- pattern matching ----

def _arg(node: fx.Node, i: int, name: str, default: Any = None) -> Any:
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _users(node: fx.Node) -> List[fx.Node]:
    return list(node.users)


def _binary_other(node: fx.Node, cur: fx.Node) -> Optional[Any]:
    """For an add or mul node reading cur, its other operand (None when cur is
    read twice or it is not a two-operand call)."""
    args = list(node.args[:2])
    if len(args) != 2 or node.kwargs.get("alpha", 1) != 1 or args.count(cur) != 1:
        return None
    return args[1] if args[0] is cur else args[0]


def _act(node: fx.Node) -> Optional[str]:
    """The epilogue activation node computes, or None."""
    kind = _classify(node)
    if kind == "gelu":
        return "gelu" if _arg(node, 1, "approximate", "none") == "tanh" else None
    if kind in ("relu", "sigmoid", "tanh", "silu") and len(node.args) == 1 and \
            not node.kwargs.get("inplace", False):
        return kind
    return None


@dataclass
class _Product:
    node: fx.Node
    x: Any
    w: Any
    bias: Any
    transpose_w: bool
    m: int
    k: int
    n: int
    dtype: str


def _product(node: fx.Node) -> _Product:
    kind = _classify(node)
    if kind == "linear":
        x, w, bias = _arg(node, 0, "input"), _arg(node, 1, "weight"), _arg(node, 2, "bias")
        transpose = True
    else:
        x, w, bias = node.args[0], node.args[1], None
        transpose = False
    xv, wv = _tensor(x, "the left operand"), _tensor(w, "the right operand")
    if wv.dim() != 2:
        raise _Skip("the right operand is %d-D (regions take a 2-D right operand)" % wv.dim())
    if xv.dim() < 2:
        raise _Skip("the left operand is %d-D" % xv.dim())
    if xv.dtype != wv.dtype:
        raise _Skip("the operands' dtypes differ")
    k = xv.shape[-1]
    n = wv.shape[0] if transpose else wv.shape[1]
    m = 1
    for d in xv.shape[:-1]:
        m *= d
    if bias is not None:
        bv = _tensor(bias, "the bias")
        if tuple(bv.shape) != (n,) or bv.dtype != xv.dtype:
            raise _Skip("the bias is not an (N,) tensor of the operands' dtype")
    return _Product(node, x, w, bias, transpose, m, k, n, _DTYPES[xv.dtype])


def _number(x: Any) -> Any:
    """A Python number as region JSON writes it: infinities as "inf" and
    "-inf" (JSON has none); NaN leaves the chain to the fallback."""
    v = float(x)
    if math.isnan(v):
        raise _Skip("a NaN constant (regions reject NaN attributes)")
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


class _Rewriter:
    def __init__(self, gm: fx.GraphModule, report: Report, grad: bool,
                 min_pointwise_ops: int, compile_fn: Optional[Callable[[str], str]]) -> None:
        self.gm = gm
        self.g = gm.graph
        self.report = report
        self.grad = grad
        self.min_pointwise_ops = min_pointwise_ops
        self.compile_fn = compile_fn
        self.taken: Set[fx.Node] = set()
        self.why: Dict[fx.Node, str] = {}

    def replace(self, kind: str, nodes: List[fx.Node], root: fx.Node, fn: Callable[..., Any],
                args: Tuple[Any, ...], region: str) -> None:
        """Replaces the pattern nodes (root last: its users get the region's
        output) with one call of fn(*args), once the daemon has compiled the
        region (when compiling ahead; its refusal leaves the pattern)."""
        pick = self.compile_fn(region) if self.compile_fn is not None else ""
        with self.g.inserting_before(root):
            new = self.g.call_function(fn, args)
        new.meta.update(root.meta)
        root.replace_all_uses_with(new)
        for n in reversed(nodes):
            if not n.users:
                self.g.erase_node(n)
        self.taken.update(nodes)
        self.report.taken.append((kind, [n.name for n in nodes], region, pick))
        log.info("tessera: took %s region for %s%s", kind, ", ".join(n.name for n in nodes),
                 " (%s)" % pick if pick else "")

    # products

    def products(self) -> None:
        for node in list(self.g.nodes):
            if node in self.taken or node.graph is not self.g:
                continue
            if _classify(node) in ("matmul", "linear"):
                try:
                    if not self.gated(node):
                        self.product(node)
                except _Skip as e:
                    self.why[node] = str(e)

    def product(self, node: fx.Node) -> None:
        p = _product(node)
        out = _tensor(node, "the product")
        nodes = [node]
        epilogue: List[str] = ["bias"] if p.bias is not None else []
        bias, residual = p.bias, None
        cur = node
        while len(cur.users) == 1:
            user = _users(cur)[0]
            kind = _classify(user)
            uv = _val(user)
            if uv is None or uv.dtype != out.dtype or tuple(uv.shape) != tuple(out.shape):
                break
            act = _act(user)
            if act is not None and user.args[0] is cur:
                epilogue.append(act)
            elif kind == "add":
                other = _binary_other(user, cur)
                ov = _val(other)
                if ov is None or ov.dtype != out.dtype:
                    break
                if tuple(ov.shape) == (p.n,) and "bias" not in epilogue:
                    bias = other
                    epilogue.append("bias")
                elif tuple(ov.shape) == tuple(out.shape):
                    residual = other
                    nodes.append(user)
                    break
                else:
                    break
            else:
                break
            nodes.append(user)
            cur = user
        if not epilogue and residual is None:
            region = json.dumps({"kind": "matmul", "dtype": p.dtype, "m": p.m, "n": p.n,
                                 "k": p.k})
            kind = "matmul"
        else:
            region = json.dumps({"kind": "fused", "dtype": p.dtype, "m": p.m, "n": p.n,
                                 "k": p.k, "epilogue": epilogue, "residual": residual is not None})
            kind = "fused"
        torch_ops._region(region)  # validated here: a bad pattern is a bug, not a run error
        self.replace(kind, nodes, nodes[-1], _run_product,
                     (region, p.x, p.w, bias, residual, p.transpose_w, tuple(out.shape)), region)

    def gated(self, node: fx.Node) -> bool:
        """act(x·Wg) ⊙ (x·Wu) starting at node as either product."""
        if len(node.users) != 1:
            return False
        user = _users(node)[0]
        act = _act(user)
        if act is not None and user.args[0] is node and len(user.users) == 1:
            gate, mul = node, _users(user)[0]
            up = _binary_other(mul, user) if _classify(mul) == "mul" else None
        elif _classify(user) == "mul":
            up, mul = node, user
            gate_act = _binary_other(mul, node)
            if not isinstance(gate_act, fx.Node) or _act(gate_act) is None:
                return False
            act = _act(gate_act)
            gate = gate_act.args[0]
            user = gate_act
            if not isinstance(gate, fx.Node) or len(gate.users) != 1 or len(user.users) != 1:
                return False
        else:
            return False
        if not isinstance(up, fx.Node) or len(up.users) != 1 or up in self.taken or \
                gate in self.taken or _classify(gate) not in ("matmul", "linear") or \
                _classify(up) not in ("matmul", "linear"):
            return False
        pg, pu = _product(gate), _product(up)
        if pg.x is not pu.x or pg.bias is not None or pu.bias is not None or \
                pg.transpose_w != pu.transpose_w or pg.n != pu.n:
            return False
        out = _tensor(mul, "the gated product")
        region = json.dumps({"kind": "gated", "dtype": pg.dtype, "m": pg.m, "k": pg.k, "h": pg.n,
                             "gate_act": act})
        torch_ops._region(region)
        # The up product may come after the activation in the graph: insert at the mul.
        self.replace("gated", [gate, up, user, mul], mul, _run_gated,
                     (region, pg.x, pg.w, pu.w, pg.transpose_w, tuple(out.shape)), region)
        return True

    # attention

    def attentions(self) -> None:
        for node in list(self.g.nodes):
            if node in self.taken or _classify(node) != "sdpa":
                continue
            try:
                self.attention(node)
            except _Skip as e:
                self.why[node] = str(e)

    def attention(self, node: fx.Node) -> None:
        q, k, v = (_arg(node, i, name) for i, name in enumerate(("query", "key", "value")))
        qv, kv, vv = (_tensor(t, name) for t, name in ((q, "q"), (k, "k"), (v, "v")))
        if _arg(node, 3, "attn_mask") is not None:
            raise _Skip("attn_mask is given (regions take no mask but causal)")
        if _arg(node, 4, "dropout_p", 0.0) != 0.0:
            raise _Skip("dropout_p is not 0")
        causal = _arg(node, 5, "is_causal", False)
        scale = _arg(node, 6, "scale", None)
        gqa = _arg(node, 7, "enable_gqa", False)
        if not isinstance(causal, bool) or not (scale is None or isinstance(scale, (int, float))):
            raise _Skip("is_causal or scale is not a constant")
        if qv.dim() != 4 or kv.dim() != 4 or vv.dim() != 4:
            raise _Skip("q, k, v are not 4-D (batch, heads, seq, dim)")
        if not (qv.dtype == kv.dtype == vv.dtype):
            raise _Skip("q, k, v dtypes differ")
        b, h, m, d = qv.shape
        hkv, n = kv.shape[1], kv.shape[2]
        if kv.shape[0] != b or tuple(vv.shape[:3]) != (b, hkv, n) or kv.shape[3] != d:
            raise _Skip("q, k, v shapes do not pair up")
        if hkv != h and not gqa:
            raise _Skip("heads differ without enable_gqa")
        if causal and m != n:
            raise _Skip("is_causal with seq_q != seq_k: torch's mask is top-left aligned, the "
                        "region's bottom-right")
        spec: Dict[str, Any] = {"kind": "attention", "dtype": _DTYPES[qv.dtype], "batch": b,
                                "heads": h, "heads_kv": hkv, "seq_q": m, "seq_k": n,
                                "head_dim": d, "head_dim_v": vv.shape[3], "causal": causal}
        if scale is not None:
            spec["scale"] = float(scale)
        region = json.dumps(spec)
        torch_ops._region(region)
        self.replace("attention", [node], node, _run_attention, (region, q, k, v), region)

    # pointwise

    def pointwise(self) -> None:
        for node in reversed(list(self.g.nodes)):
            if node.graph is not self.g or node in self.taken:
                continue
            if not self.elementwise(node):
                continue
            if self.grad:
                self.why[node] = "a graph input requires grad and pointwise regions have no " \
                                 "backward"
                continue
            group = self.grow(node)
            try:
                self.pointwise_region(node, group)
            except _Skip as e:
                for n in group:
                    self.why[n] = str(e)
                self.taken.update(group)  # tried once

    def elementwise(self, node: fx.Node) -> bool:
        kind = _classify(node)
        if kind not in _UNARY + _BINARY + ("clamp",) or node in self.taken:
            return False
        v = _val(node)
        if v is None:
            return False
        if not _static(v.shape):
            self.why[node] = "a dynamic shape (regions have static shapes)"
            return False
        if v.dtype not in _DTYPES:
            self.why[node] = "%s (regions take float32, float16, bfloat16)" % str(
                v.dtype).replace("torch.", "")
            return False
        if kind == "gelu":
            if _arg(node, 1, "approximate", "none") != "tanh":
                self.why[node] = "gelu with approximate='none' (erf): regions have the tanh form"
                return False
            return isinstance(node.args[0], fx.Node)
        if kind == "clamp":
            lo, hi = _arg(node, 1, "min"), _arg(node, 2, "max")
            return all(x is None or isinstance(x, (int, float)) for x in (lo, hi)) and \
                (lo is not None or hi is not None)
        if kind in _BINARY:
            if len(node.args) != 2 or any(k not in ("alpha",) for k in node.kwargs) or \
                    node.kwargs.get("alpha", 1) != 1:
                return False
            for a in node.args:
                if isinstance(a, fx.Node):
                    av = _val(a)
                    if av is None or av.dtype != v.dtype or not _static(av.shape):
                        return False
                elif not isinstance(a, (int, float)) or isinstance(a, bool):
                    return False
            return True
        if kind in _UNARY:
            return len(node.args) == 1 and not node.kwargs and isinstance(node.args[0], fx.Node)
        return False

    def grow(self, root: fx.Node) -> List[fx.Node]:
        """root and the elementwise nodes feeding it whose every user is in
        the group, in graph order."""
        group = {root}
        changed = True
        while changed:
            changed = False
            for n in list(group):
                for a in n.all_input_nodes:
                    if a in group or not self.elementwise(a):
                        continue
                    if all(u in group for u in a.users):
                        group.add(a)
                        changed = True
        order = {n: i for i, n in enumerate(self.g.nodes)}
        return sorted(group, key=lambda n: order[n])

    def pointwise_region(self, root: fx.Node, group: List[fx.Node]) -> None:
        if len(group) < self.min_pointwise_ops:
            raise _Skip("%d elementwise op%s (min_pointwise_ops is %d): left to fuse with its "
                        "neighbours" % (len(group), "" if len(group) == 1 else "s",
                                        self.min_pointwise_ops))
        dtype = _val(root).dtype
        inputs: List[fx.Node] = []
        names: Dict[fx.Node, str] = {}
        spec_inputs: List[Dict[str, Any]] = []
        ops: List[Dict[str, Any]] = []

        def name_of(a: Any) -> str:
            if isinstance(a, fx.Node):
                if a not in names:
                    av = _val(a)
                    if av is None or av.dtype != dtype:
                        raise _Skip("an input of the chain is not a %s tensor" % dtype)
                    names[a] = "x%d" % len(inputs)
                    inputs.append(a)
                    spec_inputs.append({"name": names[a], "shape": list(av.shape)})
                return names[a]
            out = "c%d" % len(ops)
            ops.append({"op": "const", "value": _number(a), "out": out})
            return out

        for n in group:
            kind = _classify(n)
            out = "v%d" % len(ops)
            if kind == "clamp":
                op: Dict[str, Any] = {"op": "clamp", "args": [name_of(n.args[0])], "out": out}
                lo, hi = _arg(n, 1, "min"), _arg(n, 2, "max")
                if lo is not None:
                    op["min"] = _number(lo)
                if hi is not None:
                    op["max"] = _number(hi)
            elif kind in _UNARY:
                op = {"op": kind, "args": [name_of(n.args[0])], "out": out}
            else:
                op = {"op": kind, "args": [name_of(a) for a in n.args], "out": out}
            ops.append(op)
            names[n] = out
        if len(inputs) > 16:
            raise _Skip("the chain reads %d tensors (a region reads at most 16)" % len(inputs))
        region = json.dumps({"kind": "pointwise", "dtype": _DTYPES[dtype], "inputs": spec_inputs,
                             "ops": ops, "output": names[root]})
        r = torch_ops._region(region)
        if tuple(r.output.shape) != tuple(_val(root).shape):
            raise _Skip("the chain's result is not its broadcast shape")
        self.replace("pointwise", group, root, _run_pointwise, (region, *inputs), region)

    def left(self) -> None:
        for node in self.g.nodes:
            if node.op == "call_function" and node.target in _HELPERS:
                continue
            if node.op in ("call_function", "call_method", "call_module"):
                reason = self.why.get(node)
                if reason is None:
                    kind = _classify(node)
                    reason = "no region for %s" % (kind or _target_name(node))
                self.report.left.append((node.name, _target_name(node), reason))
                log.info("tessera: left %s (%s): %s", node.name, _target_name(node), reason)


def _compile_ahead(region: str) -> str:
    """Compiles region on the ops' client (remembered there, so the op's first
    call finds it); the daemon's pick, or _Skip with its error."""
    try:
        k = torch_ops.get_client().compiled(region)
    except tessera.TesseraError as e:
        raise _Skip("the daemon did not compile it: %s" % e) from None
    return "%s (tier %d)" % (k.decision.candidate, k.decision.tier)


class Backend:
    """A torch.compile backend: backend=Backend(...) or make_backend(...).

    client: the tessera.Client the ops run on (None: tessera.torch_ops's
    current one). fallback: "inductor" (compile_fx), "eager" (the rewritten
    graph as it is) or a backend callable, for everything not taken.
    min_pointwise_ops: the fewest elementwise ops worth a pointwise region
    (one op alone is better fused by inductor into its neighbours).
    attention, products, pointwise: switch each kind of mapping off.
    compile_ahead: compile each region on the daemon while rewriting, so the
    first call does not pay for it and a region the daemon refuses (an
    ARBITER error for a forced candidate that does not apply, say) is left
    to the fallback with the daemon's error as the reason.
    reports keeps the Report of the last 64 graphs compiled."""

    def __init__(self, client: Any = None, fallback: Any = "inductor", min_pointwise_ops: int = 2,
                 attention: bool = True, products: bool = True, pointwise: bool = True,
                 compile_ahead: bool = True) -> None:
        if isinstance(fallback, str) and fallback not in ("inductor", "eager"):
            raise ValueError("fallback is 'inductor', 'eager' or a backend, got %r" % (fallback,))
        self.client = client
        self.fallback = fallback
        self.min_pointwise_ops = min_pointwise_ops
        self.kinds = {"attention": attention, "products": products, "pointwise": pointwise}
        self.compile_ahead = compile_ahead
        self.reports: Deque[Report] = deque(maxlen=64)
        self._lock = threading.Lock()

    def rewrite(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Report:
        """Rewrites gm in place; returns what was taken and left."""
        report = Report()
        grad = torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)
        rw = _Rewriter(gm, report, grad, self.min_pointwise_ops,
                       _compile_ahead if self.compile_ahead else None)
        if self.kinds["attention"]:
            rw.attentions()
        if self.kinds["products"]:
            rw.products()
        if self.kinds["pointwise"]:
            rw.pointwise()
        rw.left()
        gm.graph.lint()
        gm.recompile()
        with self._lock:
            self.reports.append(report)
        log.info("%s", report.summary())
        return report

    def __call__(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        if self.client is not None:
            torch_ops.set_client(self.client)
        self.rewrite(gm, example_inputs)
        if self.fallback == "eager":
            return gm.forward
        if self.fallback == "inductor":
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, list(example_inputs))
        return self.fallback(gm, example_inputs)


def make_backend(**kw: Any) -> Backend:
    """A Backend with the given options (see Backend)."""
    return Backend(**kw)


default = Backend()


def tessera_backend(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """The registered "tessera" backend: default(gm, example_inputs)."""
    return default(gm, example_inputs)


def _register() -> None:
    """Registers backend="tessera" unless it is registered already, or left to
    torch to register from the package's entry point (torch loads this module
    for that, then registers tessera_backend itself)."""
    from torch._dynamo.backends import registry
    if "tessera" in registry._COMPILER_FNS or registry._BACKENDS.get("tessera") is not None:
        return
    registry.register_backend(name="tessera")(tessera_backend)


_register()
