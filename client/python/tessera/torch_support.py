"""torch tensors through tesserad.

CPU tensors travel as numpy arrays (shared memory above the client's threshold).
CUDA tensors never leave the GPU: each is exported with CUDA IPC (the storage's
cudaIpcMemHandle from torch's own _share_cuda_, the same handle torch.multiprocessing
uses), imported by the daemon as a buffer, and the kernel reads the inputs and
writes the output in place; the output is a fresh torch tensor on the inputs'
device. Lifetime: the tensors are held by this call until the daemon has
finished and closed its mappings, so no copy and no dangling handle survive it.

Requirements for the CUDA path: the daemon runs the cuda backend on the same
node and GPU, torch's allocator is the default caching allocator (not
expandable segments, whose memory has no IPC handle), and the tensors are on one
device. Work queued on torch's current stream is synchronized before the daemon
reads the inputs.
"""
import numpy as np

import tessera

_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def _torch_dtype(torch, name):
    return getattr(torch, _DTYPES[name])


def _to_numpy(torch, t, spec):
    t = t.detach().to("cpu", _torch_dtype(torch, spec.dtype)).contiguous()
    if spec.dtype == "bf16":
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def _import(client, torch, t, spec):
    """A daemon buffer over t's device memory (CUDA IPC)."""
    share = t.untyped_storage()._share_cuda_()
    handle, storage_bytes, storage_offset = share[1], share[2], share[3]
    offset = storage_offset + t.storage_offset() * t.element_size()
    return client.import_cuda(handle, storage_offset + storage_bytes, spec.dtype, spec.shape,
                              offset=offset)


def run(client, region, inputs, with_decision=False, **opts):
    import torch

    if len(inputs) != len(region.inputs):
        raise tessera.TesseraError(tessera.Status.INVALID_ARGUMENT, "region takes %d inputs, got %d"
                                   % (len(region.inputs), len(inputs)))
    tensors = [x if isinstance(x, torch.Tensor) else torch.as_tensor(x) for x in inputs]
    cuda = [t.is_cuda for t in tensors]
    if not any(cuda):
        y, d = client.run(region, [_to_numpy(torch, t, s) for t, s in zip(tensors, region.inputs)],
                          with_decision=True, **opts)
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
        if tuple(t.shape) != spec.shape and t.numel() != int(np.prod(spec.shape)):
            raise tessera.TesseraError(tessera.Status.BUFFER_MISMATCH, "input %s: shape %s, want %s"
                                       % (spec.name, tuple(t.shape), spec.shape))
        staged.append(t.to(_torch_dtype(torch, spec.dtype)).contiguous())
    out = torch.empty(region.output.shape, dtype=_torch_dtype(torch, region.output.dtype),
                      device=device)
    compiled = client.compile(region, **opts)
    torch.cuda.current_stream(device).synchronize()
    buffers = []
    try:
        for t, spec in zip(staged, region.inputs):
            buffers.append(_import(client, torch, t, spec))
        out_buf = _import(client, torch, out, region.output)
        buffers.append(out_buf)
        client.launch(compiled, buffers[:-1], out_buf)
    finally:
        for b in buffers:
            b.free()
    return (out, compiled.decision) if with_decision else out
