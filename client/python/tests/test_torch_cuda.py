"""The tessera:: ops and the compile backend on CUDA tensors, against a tesserad
running the cuda backend on this node (CUDA IPC: the tensors stay on the GPU).
Skipped where torch sees no GPU. A GPU candidate is held to the oracle's bound
for its dtype (torch_util.ORACLE_BOUND), the bound the daemon verified it
against."""
import json

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no GPU", allow_module_level=True)

import tessera  # noqa: E402
from conftest import serve  # noqa: E402
from tessera import torch_backend, torch_ops  # noqa: E402
from torch_util import ORACLE_BOUND, f64, rel, rounded  # noqa: E402

F = torch.nn.functional


@pytest.fixture(scope="module")
def cuda_daemon():
    yield from serve(extra=("--backend", "cuda"))


@pytest.fixture
def ops(cuda_daemon):
    with tessera.connect(cuda_daemon.url, timeout_ms=120000, force="") as c:
        before = torch_ops.set_client(c)
        torch._dynamo.reset()
        yield torch.ops.tessera
        c.release_imports()
        torch_ops.set_client(before)


def test_matmul_on_the_gpu_and_its_gradient(ops):
    dt = torch.bfloat16
    a = rounded((256, 512), dt, 1).cuda().requires_grad_(True)
    b = rounded((512, 128), dt, 2, scale=512 ** -0.5).cuda().requires_grad_(True)
    g = rounded((256, 128), dt, 3).cuda()
    text = json.dumps({"kind": "matmul", "dtype": "bf16", "m": 256, "n": 128, "k": 512})
    y = ops.matmul(text, a, b)
    assert y.is_cuda and y.device == a.device and y.dtype == dt
    y.backward(g)
    a64, b64 = f64(a), f64(b)
    want = a64 @ b64
    want.backward(g.double())
    assert rel(y, want) <= ORACLE_BOUND[dt]
    assert a.grad.is_cuda and rel(a.grad, a64.grad) <= 2 * ORACLE_BOUND[dt]
    assert rel(b.grad, b64.grad) <= 2 * ORACLE_BOUND[dt]


def test_attention_on_the_gpu(ops):
    dt = torch.bfloat16
    q = rounded((2, 8, 128, 64), dt, 4).cuda()
    kv = rounded((2, 2, 128, 64), dt, 5).cuda()
    text = json.dumps({"kind": "attention", "dtype": "bf16", "batch": 2, "heads": 8,
                       "heads_kv": 2, "seq_q": 128, "seq_k": 128, "head_dim": 64,
                       "causal": True})
    y = ops.attention(text, q, kv, kv)
    want = F.scaled_dot_product_attention(q.double(), kv.double(), kv.double(), is_causal=True,
                                          enable_gqa=True)
    assert y.is_cuda and rel(y, want) <= ORACLE_BOUND[dt]
    # The same call again reuses the kernel and the imports.
    assert torch.equal(ops.attention(text, q, kv, kv), y)


def test_the_compile_backend_on_the_gpu(ops):
    lin1 = torch.nn.Linear(256, 512, bias=True).cuda().to(torch.bfloat16)
    lin2 = torch.nn.Linear(512, 256, bias=False).cuda().to(torch.bfloat16)

    def f(x):
        return x + lin2(F.gelu(lin1(x), approximate="tanh"))

    x = rounded((4, 64, 256), torch.bfloat16, 6).cuda()
    be = torch_backend.make_backend()
    with torch.no_grad():
        got = torch.compile(f, backend=be)(x)
        want = f(x)
    assert be.reports[-1].counts == {"fused": 2}
    assert got.is_cuda and rel(got, want) <= 2 * ORACLE_BOUND[torch.bfloat16]
