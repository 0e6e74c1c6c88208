"""Tolerances and references shared by the torch tests, derived from the dtypes.

u(dtype) is the unit roundoff (half of torch.finfo's eps). A region rounds its
result to the output dtype once from an f32 (device) or f64 (CPU reference)
accumulator, so against a float64 reference computed from the same rounded
inputs its error is at most u(out) per element, plus the f32 accumulation of a
K-term sum (K·u(f32)). Gradients go through one more rounding of the incoming
gradient and of the intermediate derivative to the region's dtype and one of
the result to the input's dtype: 4·u(dtype) plus the accumulation term."""
import torch


def u(dtype: torch.dtype) -> float:
    """The unit roundoff of dtype."""
    return torch.finfo(dtype).eps / 2


def forward_bound(dtype: torch.dtype, k: int = 1) -> float:
    """The relative (L2) error bound of one region's output."""
    return u(dtype) + k * u(torch.float32)


def grad_bound(dtype: torch.dtype, k: int = 1) -> float:
    """The relative (L2) error bound of a gradient through backward regions."""
    return 4 * u(dtype) + 2 * k * u(torch.float32)


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    """‖got − want‖₂ / ‖want‖₂ in float64."""
    g, w = got.detach().double(), want.detach().double()
    return ((g - w).norm() / w.norm()).item()


def rounded(shape, dtype: torch.dtype, seed: int, scale: float = 1.0,
            requires_grad: bool = False) -> torch.Tensor:
    """Seeded normal values in dtype (so the region and the reference read the
    same numbers)."""
    g = torch.Generator().manual_seed(seed)
    t = (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)
    return t.requires_grad_(requires_grad)


def f64(t: torch.Tensor) -> torch.Tensor:
    """A float64 leaf with t's values, requiring grad when t does."""
    return t.detach().double().requires_grad_(t.requires_grad)


# The oracle's default bound per output dtype (tsr_dtype_tolerance, lib/dtype.c):
# what a candidate the daemon verified may be off by, relative L2, on any backend.
ORACLE_BOUND = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
