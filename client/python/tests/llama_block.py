"""The Llama-style block the torch backend's tests and
tests/bench/llama_block_bench.py both run: RMSNorm → attention with GQA
(causal SDPA) → residual → RMSNorm → SwiGLU MLP → residual, then, with tail, a
pointwise tail; weights are seeded normal values scaled 1/√fan-in, so a block
of the same arguments and seed has the same weights in either."""
import torch

nn = torch.nn
F = torch.nn.functional


class Block(nn.Module):
    """The block; dim, heads, heads_kv and ffn are its sizes, seed its
    weights'."""

    def __init__(self, dim=64, heads=4, heads_kv=2, ffn=96, tail=True, seed=7, eps=1e-5):
        super().__init__()
        self.heads, self.heads_kv, self.hd = heads, heads_kv, dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, heads_kv * self.hd, bias=False)
        self.wv = nn.Linear(dim, heads_kv * self.hd, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.w1 = nn.Linear(dim, ffn, bias=False)
        self.w3 = nn.Linear(dim, ffn, bias=False)
        self.w2 = nn.Linear(ffn, dim, bias=False)
        self.n1, self.n2 = nn.RMSNorm(dim, eps=eps), nn.RMSNorm(dim, eps=eps)
        self.tail = tail
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for lin in (self.wq, self.wk, self.wv, self.wo, self.w1, self.w3, self.w2):
                lin.weight.copy_(torch.randn(lin.weight.shape, generator=g)
                                 * lin.weight.shape[1] ** -0.5)

    def forward(self, x):
        b, s, d = x.shape
        y = self.n1(x)
        q = self.wq(y).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.wk(y).view(b, s, self.heads_kv, self.hd).transpose(1, 2)
        v = self.wv(y).view(b, s, self.heads_kv, self.hd).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, d))
        h = self.n2(x)
        x = x + self.w2(F.silu(self.w1(h)) * self.w3(h))
        if self.tail:
            x = torch.tanh(x * 0.5 + 1.0)
        return x
