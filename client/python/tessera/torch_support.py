"""torch tensors through tesserad.

CPU tensors travel as numpy arrays (shared memory above the client's
threshold). CUDA tensors never leave the GPU: the allocation each lies in is
exported with CUDA IPC (cuIpcGetMemHandle on the caching allocator's block,
found with cuMemGetAddressRange), imported by the daemon as a buffer at the
tensor's offset, and the kernel reads the inputs and writes the output in
place; the output is a fresh torch tensor on the inputs' device. Lifetime: the
daemon has finished with the tensors when the call returns. The imports are
remembered per client (Client.imported), so a tensor's allocation is opened by
the daemon once and later calls cost one launch round trip; an IPC handle names
one allocation for its whole life, so a remembered import never points at other
memory. Call client.release_imports() before torch.cuda.empty_cache(), so the
daemon lets go of blocks torch gives back.

Requirements for the CUDA path: the daemon runs the cuda backend on the same
node and GPU, torch's allocator is the default caching allocator (not
expandable segments, whose memory has no IPC handle), and the tensors are on one
device. Work queued on torch's current stream is synchronized before the daemon
reads the inputs.

Inputs are checked as numpy inputs are (tessera.Client.run): exact shapes
(BUFFER_MISMATCH), and floating element types only (float32, float16,
bfloat16, float64; anything else is BAD_ATTRIBUTE), never cast silently.
"""
from __future__ import annotations

import ctypes
import importlib
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

import tessera

_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
_INPUT_TYPES = ("float32", "float16", "bfloat16", "float64")


def _torch_dtype(torch: Any, name: str) -> Any:
    return getattr(torch, _DTYPES[name])


def _check(torch: Any, t: Any, spec: tessera.TensorSpec) -> None:
    """The element type and shape checks of tessera.Client.run, for a tensor."""
    kind = str(t.dtype).replace("torch.", "")
    if kind not in _INPUT_TYPES:
        raise tessera.TesseraError(tessera.Status.BAD_ATTRIBUTE,
                                   "%s: element type '%s' unsupported (need %s)"
                                   % (spec.name, kind, ", ".join(_INPUT_TYPES)))
    if tuple(t.shape) != spec.shape:
        raise tessera.TesseraError(tessera.Status.BUFFER_MISMATCH, "%s: shape %s, expected %s"
                                   % (spec.name, tessera._shape_text(tuple(t.shape)),
                                      tessera._shape_text(spec.shape)))


def _to_numpy(torch: Any, t: Any) -> Any:
    """A CPU tensor's values as numpy (bfloat16 as float32, which is exact)."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        t = t.float()
    return t.contiguous().numpy()


_driver: Dict[str, Any] = {}


def _cuda_driver() -> Any:
    """libcuda through ctypes, for cuMemGetAddressRange and cuIpcGetMemHandle."""
    if "lib" not in _driver:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                                ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
        lib.cuIpcGetMemHandle.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
        _driver["lib"] = lib
    return _driver["lib"]


def _export(torch: Any, t: Any) -> Tuple[bytes, int, int]:
    """(handle, allocation bytes, offset of t in it): the allocation torch's
    caching allocator carved t from, exported with the driver's own
    cuIpcGetMemHandle (the context torch made current on this thread)."""
    lib = _cuda_driver()
    torch.cuda.set_device(t.device)
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    rc = lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), t.data_ptr())
    if rc != 0:
        raise tessera.TesseraError(tessera.Status.CUDA_ERROR, "cuMemGetAddressRange: error %d" % rc)
    handle = ctypes.create_string_buffer(64)
    rc = lib.cuIpcGetMemHandle(handle, base.value)
    if rc != 0:
        raise tessera.TesseraError(tessera.Status.CUDA_ERROR, "cuIpcGetMemHandle: error %d (memory "
                                   "from expandable segments or cudaMallocAsync has no IPC "
                                   "handle)" % rc)
    return handle.raw, size.value, t.data_ptr() - base.value


def _import(client: tessera.Client, torch: Any, t: Any,
            spec: tessera.TensorSpec) -> tessera.Buffer:
    """A daemon buffer over t's device memory (CUDA IPC)."""
    handle, nbytes, offset = _export(torch, t)
    return client.imported(handle, nbytes, spec.dtype, spec.shape, offset=offset)


def run(client: tessera.Client, region: tessera.Region, inputs: Sequence[Any],
        with_decision: bool = False, **opts: Any) -> Any:
    """tessera.Client.run for inputs of which at least one is a torch tensor;
    inputs are in signature order already. Returns a torch tensor (and the
    Decision when with_decision)."""
    torch = importlib.import_module("torch")
    tensors: List[Any] = [x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
                          for x in inputs]
    for t, spec in zip(tensors, region.inputs):
        _check(torch, t, spec)
    cuda = [t.is_cuda for t in tensors]
    if not any(cuda):
        y, d = client.run(region, [_to_numpy(torch, t) for t in tensors], with_decision=True,
                          **opts)
        out = torch.from_numpy(np.ascontiguousarray(y)).to(_torch_dtype(torch,
                                                                         region.output.dtype))
        return (out, d) if with_decision else out
    devices = {t.device for t in tensors}
    if not all(cuda) or len(devices) != 1:
        raise tessera.TesseraError(tessera.Status.INVALID_ARGUMENT,
                                   "CUDA inputs must all be on one device, got %s"
                                   % sorted(str(d) for d in devices))
    device = devices.pop()
    staged = []
    for t, spec in zip(tensors, region.inputs):
        staged.append(t.to(_torch_dtype(torch, spec.dtype)).contiguous())
    out = torch.empty(region.output.shape, dtype=_torch_dtype(torch, region.output.dtype),
                      device=device)
    compiled = client.compiled(region, **opts)
    torch.cuda.current_stream(device).synchronize()
    buffers = [_import(client, torch, t, spec) for t, spec in zip(staged, region.inputs)]
    out_buf = _import(client, torch, out, region.output)
    client.launch(compiled, buffers, out_buf)
    return (out, compiled.decision) if with_decision else out
