#!/usr/bin/env python3
"""Writes the reference executor's test vectors into tests/data/<case>/.

Each case holds region.json, in0.npy, in1.npy, ... (float32 values already
representable in the region's dtype) and out.npy (float32 values representable
in the output dtype), computed here with numpy independently of the C code:

  * pointwise: numpy float32 ufuncs, one op at a time (np.exp on float32, ...).
    Ops that numpy lacks (sigmoid, silu, softplus, gelu, rsqrt) are evaluated from
    their defining formula in float64 on the float32 operands and rounded to
    float32 once, which is their definition in the op table.
  * matmul, fused, gated, attention: float64 arithmetic on the stored inputs.
  * the output rounded to the out dtype: f16 and bf16 rounding is done here from
    float64 with frexp/rint (round to nearest even), not through the C code.

tests/data/cases.txt lists every case with the tolerance the test applies, in
ulps of the output dtype: 0 where both sides round an exact result once, more
where numpy's float32 transcendental is not correctly rounded or where the f64
summation order differs. Deterministic: fixed seeds; rerun to regenerate.
"""
import json
import os
import shutil

import numpy as np

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
f32 = np.float32

SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5,
                    3e38, -3e38, 1e30, -1e30, 1e-30, -1e-30, 1e-38, 1e-45, 88.0, -88.0,
                    20.0, -20.0, 7.0, -7.0, 1e-4], dtype=f32)


def round_to(dtype, x):
    """Rounds float64 (or float32) values to f32/f16/bf16, nearest even."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "f32":
        with np.errstate(over="ignore"):
            return x.astype(f32)
    bits, emin, maxexp = (11, -13, 16) if dtype == "f16" else (8, -125, 128)
    out = np.empty_like(x)
    fin = np.isfinite(x)
    out[~fin] = x[~fin]
    v = x[fin]
    _, e = np.frexp(v)  # |v| in [2^(e-1), 2^e)
    e = np.maximum(e, emin)  # below the normal range the quantum stays fixed
    q = np.ldexp(1.0, e - bits)
    r = np.rint(v / q) * q  # exact scaling, np.rint rounds half to even
    r[np.abs(r) >= 2.0 ** maxexp - (2.0 ** (maxexp - bits - 1) if dtype == "f16" else 0)] = np.inf
    # f16 overflows at 65520 (midpoint to 2^16); bf16 at 2^128 exactly after rounding.
    r = np.where(np.isinf(r), np.copysign(np.inf, v), r)
    out[fin] = r
    return out.astype(f32)


def bf16_bits_round(x):
    """bf16 rounding of float32 data by uint32 arithmetic (RNE), NaN kept."""
    x = np.asarray(x, dtype=f32)
    b = x.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    r = np.where(np.isnan(x), (b.astype(np.uint32) | 0x00400000) & 0xFFFF0000, r)
    return r.astype(np.uint32).view(f32)


def stored(dtype, x):
    x = np.asarray(x, dtype=f32)
    if dtype == "bf16":
        return bf16_bits_round(x)
    if dtype == "f16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(f32)
    return x


CASES = []


def write_case(name, region, inputs, out, ulps):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "region.json"), "w") as f:
        json.dump(region, f, indent=1)
        f.write("\n")
    for i, a in enumerate(inputs):
        np.save(os.path.join(d, "in%d.npy" % i), np.asarray(a, dtype=f32, order="C"))
    np.save(os.path.join(d, "out.npy"), np.asarray(out, dtype=f32, order="C"))
    CASES.append((name, ulps))


# ---- pointwise ----

def sigmoid64(x):
    return 1.0 / (1.0 + np.exp(-x))


def gelu64(x):
    t = np.clip(0.7978845608028654 * (x + 0.044715 * x * x * x), -30.0, 30.0)
    return 0.5 * x * (1.0 + np.tanh(t))


def via64(fn):
    def g(a):
        with np.errstate(all="ignore"):
            return fn(a.astype(np.float64)).astype(f32)
    return g


UNARY = {
    "neg": (np.negative, 0), "abs": (np.abs, 0), "exp": (np.exp, 4), "log": (np.log, 4),
    "sqrt": (np.sqrt, 0), "rsqrt": (via64(lambda x: 1.0 / np.sqrt(x)), 1),
    "log1p": (np.log1p, 4), "expm1": (np.expm1, 4),
    "reciprocal": (lambda a: np.divide(f32(1), a), 0),
    "relu": (lambda a: np.maximum(a, f32(0)), 0),
    "sigmoid": (via64(sigmoid64), 1), "tanh": (np.tanh, 4),
    "silu": (via64(lambda x: x * sigmoid64(x)), 1),
    "softplus": (via64(lambda x: np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))), 1),
    "sign": (np.sign, 0), "gelu": (via64(gelu64), 1),
}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "maximum": np.maximum, "minimum": np.minimum, "pow": np.power}


def pw_region(dtype, inputs, ops, output, out_dtype=None):
    r = {"kind": "pointwise", "dtype": dtype,
         "inputs": [{"name": n, "shape": list(s)} for n, s in inputs],
         "ops": ops, "output": output}
    if out_dtype:
        r["out_dtype"] = out_dtype
    return r


def gen_pointwise(rng):
    x = np.concatenate([SPECIAL, rng.standard_normal(39).astype(f32) * f32(3)])
    for name, (fn, ulps) in UNARY.items():
        for dtype in ("f32", "f16", "bf16") if name in ("exp", "gelu", "relu", "silu") else ("f32",):
            a = stored(dtype, x)
            with np.errstate(all="ignore"):
                y = fn(a)
            region = pw_region(dtype, [("x", a.shape)],
                               [{"op": name, "args": ["x"], "out": "y"}], "y")
            write_case("pw_%s_%s" % (name, dtype), region, [a], round_to(dtype, y),
                       ulps if dtype == "f32" else min(ulps, 1))
    # binary ops: every pair of special values, plus random operands
    sp = SPECIAL
    a = np.concatenate([np.repeat(sp, len(sp)), rng.standard_normal(64).astype(f32)])
    b = np.concatenate([np.tile(sp, len(sp)), rng.standard_normal(64).astype(f32) * f32(2)])
    for name, fn in BINARY.items():
        with np.errstate(all="ignore"):
            y = fn(a, b)
        region = pw_region("f32", [("a", a.shape), ("b", b.shape)],
                           [{"op": name, "args": ["a", "b"], "out": "y"}], "y")
        write_case("pw_%s_f32" % name, region, [a, b], y, 1 if name == "pow" else 0)
    # clamp (both bounds, one bound), const
    for tag, attrs, lo, hi in (("both", {"min": -1.5, "max": 2.0}, -1.5, 2.0),
                               ("min", {"min": 0.0}, 0.0, None),
                               ("max", {"max": 0.25}, None, 0.25)):
        y = np.clip(x, f32(lo) if lo is not None else None, f32(hi) if hi is not None else None)
        op = dict({"op": "clamp", "args": ["x"], "out": "y"}, **attrs)
        write_case("pw_clamp_%s_f32" % tag, pw_region("f32", [("x", x.shape)], [op], "y"),
                   [x], y, 0)
    # broadcasting: scalar, row, column, rank mismatch; const; a small DAG
    s = np.array(rng.standard_normal(), dtype=f32)
    m = rng.standard_normal((3, 4)).astype(f32)
    row = rng.standard_normal(4).astype(f32)
    col = rng.standard_normal((3, 1)).astype(f32)
    r3 = rng.standard_normal((2, 1, 4)).astype(f32)
    for tag, lhs in (("scalar", s), ("row", row), ("col", col), ("rank3", r3)):
        y = np.add(m, lhs) * lhs
        ops = [{"op": "add", "args": ["m", "v"], "out": "t"},
               {"op": "mul", "args": ["t", "v"], "out": "y"}]
        write_case("pw_bcast_%s_f32" % tag,
                   pw_region("f32", [("m", m.shape), ("v", lhs.shape)], ops, "y"),
                   [m, lhs], y, 0)
    # rank-mismatch both ways: (3,1) with (2,1,4) -> (2,3,4)
    y = np.maximum(col, r3)
    write_case("pw_bcast_both_f32",
               pw_region("f32", [("c", col.shape), ("r", r3.shape)],
                         [{"op": "maximum", "args": ["c", "r"], "out": "y"}], "y"),
               [col, r3], y, 0)
    # DAG with a const (0.1 is rounded to f32 before use), mixed dtypes in and out
    for dtype, out_dtype in (("f32", None), ("f16", "f32"), ("bf16", "bf16"), ("f32", "f16")):
        a = stored(dtype, rng.standard_normal((5, 6)).astype(f32))
        b = stored(dtype, rng.standard_normal(6).astype(f32))
        c01 = f32(0.1)
        t0 = np.multiply(a, c01)
        t1 = np.subtract(t0, b)
        t2 = np.maximum(t1, a)
        y = np.divide(t2, np.add(np.abs(b), f32(1)))
        ops = [{"op": "const", "value": 0.1, "out": "c"},
               {"op": "mul", "args": ["a", "c"], "out": "t0"},
               {"op": "sub", "args": ["t0", "b"], "out": "t1"},
               {"op": "maximum", "args": ["t1", "a"], "out": "t2"},
               {"op": "const", "value": 1, "out": "one"},
               {"op": "abs", "args": ["b"], "out": "ab"},
               {"op": "add", "args": ["ab", "one"], "out": "den"},
               {"op": "div", "args": ["t2", "den"], "out": "y"}]
        od = out_dtype or dtype
        write_case("pw_dag_%s_%s" % (dtype, od),
                   pw_region(dtype, [("a", a.shape), ("b", b.shape)], ops, "y", out_dtype),
                   [a, b], round_to(od, y), 0)
    # output naming an input directly
    write_case("pw_identity_bf16",
               pw_region("bf16", [("a", (7,))], [{"op": "neg", "args": ["a"], "out": "t"}], "a",
                         "f16"),
               [stored("bf16", x[:7])], round_to("f16", stored("bf16", x[:7])), 0)


# ---- matmul-like ----

ACT64 = {"relu": lambda x: np.where(np.isnan(x), x, np.maximum(x, 0.0)),
         "gelu": gelu64, "silu": lambda x: x * sigmoid64(x), "sigmoid": sigmoid64,
         "tanh": np.tanh}
PRO64 = {"neg": np.negative, "abs": np.abs, "exp": np.exp, "tanh": np.tanh, "relu": ACT64["relu"],
         "softplus": lambda x: np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))),
         "sqrt": np.sqrt}


def reduce64(kind, y, eps):
    if kind == "rmsnorm":
        return y / np.sqrt(np.mean(y * y, axis=1, keepdims=True) + eps)
    if kind == "layer_norm":
        mu = np.mean(y, axis=1, keepdims=True)
        return (y - mu) / np.sqrt(np.mean((y - mu) ** 2, axis=1, keepdims=True) + eps)
    if kind == "softmax":
        e = np.exp(y - np.max(y, axis=1, keepdims=True))
        return e / np.sum(e, axis=1, keepdims=True)
    return y


def gen_matmul(rng):
    for dtype, out_dtype in (("f32", None), ("f16", None), ("bf16", None), ("bf16", "f32")):
        m, n, k = 13, 10, 37
        a = stored(dtype, rng.standard_normal((m, k)))
        b = stored(dtype, rng.standard_normal((k, n)))
        y = a.astype(np.float64) @ b.astype(np.float64)
        region = {"kind": "matmul", "dtype": dtype, "m": m, "n": n, "k": k}
        if out_dtype:
            region["out_dtype"] = out_dtype
        od = out_dtype or dtype
        write_case("mm_%s_%s" % (dtype, od), region, [a, b], round_to(od, y), 1)

    fused = [
        ("bias_relu", [], ["bias", "relu"], False, None),
        ("gelu", [], ["gelu"], False, None),
        ("silu_bias", [], ["silu", "bias"], False, None),
        ("sigmoid", [], ["sigmoid"], False, None),
        ("tanh_res", [], ["tanh"], True, None),
        ("prologue", ["abs", "sqrt", "neg"], [], False, None),
        ("prologue_exp_relu", ["exp"], ["relu"], False, None),
        ("residual", [], [], True, None),
        ("bias_res", [], ["bias"], True, None),
        ("rmsnorm", [], ["bias"], False, "rmsnorm"),
        ("softmax", ["tanh"], [], False, "softmax"),
        ("layer_norm", [], ["gelu"], False, "layer_norm"),
    ]
    for i, (tag, pro, epi, res, red) in enumerate(fused):
        for dtype in ("f32", "bf16") if i % 3 == 0 else ("f32",):
            m, n, k = 9, 24, 19
            a = stored(dtype, rng.standard_normal((m, k)))
            b = stored(dtype, rng.standard_normal((k, n)) * 0.5)
            ins = [a, b]
            a64 = a.astype(np.float64)
            for p in pro:
                a64 = PRO64[p](a64)
            y = a64 @ b.astype(np.float64)
            bias = None
            for e in epi:
                if e == "bias":
                    bias = stored(dtype, rng.standard_normal(n))
                    y = y + bias.astype(np.float64)
                else:
                    y = ACT64[e](y)
            if bias is not None:
                ins.append(bias)
            if res:
                r = stored(dtype, rng.standard_normal((m, n)))
                ins.append(r)
                y = y + r.astype(np.float64)
            eps = 1e-5
            y = reduce64(red, y, eps)
            region = {"kind": "fused", "dtype": dtype, "m": m, "n": n, "k": k,
                      "prologue": pro, "epilogue": epi, "residual": res,
                      "reduction": red, "eps": eps}
            write_case("fused_%s_%s" % (tag, dtype), region, ins, round_to(dtype, y), 1)

    for act in ("silu", "gelu", "relu", "sigmoid", "tanh"):
        for dtype in ("f32", "bf16", "f16") if act == "silu" else ("f32",):
            m, k, h = 7, 33, 12
            a = stored(dtype, rng.standard_normal((m, k)))
            wg = stored(dtype, rng.standard_normal((k, h)) * 0.3)
            wu = stored(dtype, rng.standard_normal((k, h)) * 0.3)
            a64 = a.astype(np.float64)
            y = ACT64[act](a64 @ wg.astype(np.float64)) * (a64 @ wu.astype(np.float64))
            region = {"kind": "gated", "dtype": dtype, "m": m, "k": k, "h": h, "gate_act": act}
            write_case("gated_%s_%s" % (act, dtype), region, [a, wg, wu], round_to(dtype, y), 1)


def attention64(q, k, v, heads_kv, scale, causal):
    B, H, M, D = q.shape
    N = k.shape[2]
    out = np.zeros((B, H, M, v.shape[3]))
    for b in range(B):
        for h in range(H):
            kh = h // (H // heads_kv)
            s = scale * (q[b, h].astype(np.float64) @ k[b, kh].astype(np.float64).T)
            for mi in range(M):
                row = s[mi].copy()
                if causal:
                    row[np.arange(N) > mi + (N - M)] = -np.inf
                if np.all(np.isneginf(row)):
                    continue  # fully masked: zeros
                p = np.exp(row - np.max(row))
                p /= p.sum()
                out[b, h, mi] = p @ v[b, kh].astype(np.float64)
    return out


def gen_attention(rng):
    cases = [
        # tag, B, H, Hkv, M, N, D, Dv, causal, scale
        ("plain", 2, 2, 2, 5, 7, 8, 8, False, None),
        ("causal_square", 1, 2, 2, 6, 6, 8, 4, True, None),
        ("causal_m_lt_n", 1, 2, 1, 3, 9, 8, 8, True, 0.3),
        ("causal_m_gt_n", 1, 1, 1, 6, 3, 4, 4, True, None),  # rows 0..2 fully masked
        ("gqa", 2, 4, 2, 4, 5, 16, 8, False, None),
    ]
    for tag, B, H, Hkv, M, N, D, Dv, causal, scale in cases:
        for dtype in ("f32", "bf16", "f16") if tag in ("gqa", "causal_m_lt_n") else ("f32",):
            q = stored(dtype, rng.standard_normal((B, H, M, D)))
            k = stored(dtype, rng.standard_normal((B, Hkv, N, D)))
            v = stored(dtype, rng.standard_normal((B, Hkv, N, Dv)))
            s = scale if scale is not None else 1.0 / np.sqrt(D)
            y = attention64(q, k, v, Hkv, s, causal)
            region = {"kind": "attention", "dtype": dtype, "batch": B, "heads": H,
                      "heads_kv": Hkv, "seq_q": M, "seq_k": N, "head_dim": D,
                      "head_dim_v": Dv, "causal": causal}
            if scale is not None:
                region["scale"] = scale
            write_case("att_%s_%s" % (tag, dtype), region, [q, k, v], round_to(dtype, y), 1)


def main():
    if os.path.isdir(OUT):
        for e in os.listdir(OUT):
            p = os.path.join(OUT, e)
            if os.path.isdir(p):
                shutil.rmtree(p)
    os.makedirs(OUT, exist_ok=True)
    gen_pointwise(np.random.default_rng(1))
    gen_matmul(np.random.default_rng(2))
    gen_attention(np.random.default_rng(3))
    with open(os.path.join(OUT, "cases.txt"), "w") as f:
        f.write("# case  tolerance-in-ulps-of-the-output-dtype (written by tests/gen_vectors.py)\n")
        for name, ulps in CASES:
            f.write("%s %d\n" % (name, ulps))


if __name__ == "__main__":
    main()
