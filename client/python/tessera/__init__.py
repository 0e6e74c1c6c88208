"""tessera — the Python client of tesserad.

A thin layer over libtessera-client (loaded with ctypes; see _lib.py for where
it is looked for). numpy arrays go in and come out; torch tensors are accepted
where numpy arrays are (see run). Every failure is a TesseraError carrying the
daemon's status code and message.

    import tessera
    with tessera.connect("ipc:///tmp/tesserad.sock") as c:
        region = tessera.Region({"kind": "pointwise", ...})
        y = c.run(region, [a, b])

Threading: a Client may be used from several threads at once (the C library runs
each call on its own request context); close it only when no call is running.
"""
import collections
import ctypes
import enum
import json
import os
import threading
from ctypes import byref, c_double, c_size_t, c_uint32, c_uint64, c_void_p

import numpy as np

from . import _lib
from ._lib import lib

__all__ = ["Status", "TesseraError", "Region", "Client", "Buffer", "Decision", "Verdict",
           "SharedMemory", "connect", "run", "default_client"]

# Host tensors at least this large go through a shared-memory segment instead of
# the message, on ipc:// connections ($TESSERA_SHM_THRESHOLD overrides; 0 = never).
SHM_THRESHOLD_DEFAULT = 256 << 10

Status = enum.IntEnum("Status", {lib.tsr_status_name(i).decode(): i for i in range(36)})

DTYPES = ("f32", "f16", "bf16")
_NUMPY_DTYPES = {"f32": np.dtype("<f4"), "f16": np.dtype("<f2"), "bf16": np.dtype("<u2")}


class TesseraError(Exception):
    """A call failed. code is a Status; message is the daemon's (or the library's)
    text, which names the field or handle at fault."""

    def __init__(self, code, message):
        try:
            code = Status(code)
        except ValueError:
            pass
        self.code = code
        self.message = message
        name = code.name if isinstance(code, Status) else str(code)
        super().__init__("%s: %s" % (name, message))


def _check(status, err):
    if status != 0:
        raise TesseraError(status, err.message.decode(errors="replace"))


def _s(b):
    return b.decode(errors="replace")


def _b(s):
    return None if s is None else s.encode()


# ---- bf16 (numpy has no such dtype: bf16 data is float32 to Python) ----

def f32_to_bf16_bits(a):
    """Rounds float32 values to bf16 (nearest even; NaN stays NaN), as uint16 bits."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _to_wire(array, dtype):
    """The dense little-endian bytes of array in a storage dtype (a contiguous
    numpy array whose buffer is passed to C)."""
    if dtype == "bf16":
        a = np.asarray(array)
        if a.dtype == np.uint16:
            return np.ascontiguousarray(a)
        return f32_to_bf16_bits(a)
    return np.ascontiguousarray(array, dtype=_NUMPY_DTYPES[dtype])


def _from_wire(raw, dtype):
    return bf16_bits_to_f32(raw) if dtype == "bf16" else raw


# ---- results ----

class Verdict:
    """The oracle's verdict (docs/architecture.md, "Oracle"): state is "not_run",
    "pass" or "fail"."""

    _STATES = ("not_run", "pass", "fail")

    def __init__(self, v):
        self.state = self._STATES[v.state] if 0 <= v.state < 3 else str(v.state)
        self.elements = v.elements
        self.probes = v.probes
        self.max_abs_error = v.max_abs_error
        self.rel_error = v.rel_error
        self.bound = v.bound
        self.nan_mismatches = v.nan_mismatches
        self.inf_mismatches = v.inf_mismatches
        self.first_bad_index = v.first_bad_index
        self.reason = _s(v.reason)
        self.cached = v.cached

    @property
    def passed(self):
        return self.state == "pass"

    def __repr__(self):
        return "Verdict(%s, rel_error=%g, bound=%g)" % (self.state, self.rel_error, self.bound)


class Decision:
    """Why a candidate serves a region: candidate, tier, version, reason
    ("forced", "tier", "measured", "fallback"), verdict, cache_hit, cache_level."""

    def __init__(self, d):
        self.candidate = _s(d.candidate)
        self.tier = d.tier
        self.version = d.version
        self.reason = _s(d.reason)
        self.verdict = Verdict(d.verdict)
        self.cache_hit = d.cache_hit
        self.cache_level = _s(d.cache_level)

    def __repr__(self):
        return "Decision(%s, tier=%d, reason=%s)" % (self.candidate, self.tier, self.reason)


class Compiled:
    def __init__(self, c):
        self.kernel = c.kernel
        self.key = _s(c.key)
        self.fingerprint = _s(c.fingerprint)
        self.decision = Decision(c.decision)
        self.binary_bytes = c.binary_bytes
        self.compile_ms = c.compile_ms


class TensorSpec:
    """One tensor of a region's signature: name, dtype ("f32", ...), shape, nbytes."""

    def __init__(self, t):
        self.name = _s(t.name)
        self.dtype = DTYPES[t.dtype]
        self.shape = tuple(t.shape[i] for i in range(t.rank))
        self.nbytes = t.bytes

    def __repr__(self):
        return "TensorSpec(%r, %s, %r)" % (self.name, self.dtype, self.shape)


# ---- regions ----

class Region:
    """A validated region (docs/regions.md), built from a dict, JSON text or a .json file.

    The region is parsed and validated by the C library, so an invalid one raises
    TesseraError with the same code and message the daemon would give."""

    def __init__(self, spec):
        if isinstance(spec, Region):
            spec = spec.json
        if isinstance(spec, dict):
            text = json.dumps(spec)
        elif isinstance(spec, (str, bytes)):
            text = spec.decode() if isinstance(spec, bytes) else spec
        else:
            raise TypeError("Region wants a dict or JSON text, got %s" % type(spec).__name__)
        self.json = text
        raw = text.encode()
        handle = c_void_p()
        err = _lib.Error()
        _check(lib.tsr_client_region_load(raw, len(raw), byref(handle), byref(err)), err)
        self._handle = handle
        ins = (_lib.Tensor * _lib.MAX_INPUTS)()
        out = _lib.Tensor()
        n = lib.tsr_client_region_signature(handle, ins, byref(out))
        self.inputs = [TensorSpec(ins[i]) for i in range(n)]
        self.output = TensorSpec(out)
        self.kind = json.loads(text).get("kind")

    @classmethod
    def from_file(cls, path):
        with open(path, "r", encoding="utf-8") as f:
            return cls(f.read())

    @classmethod
    def from_json(cls, text_or_path):
        """JSON text, or the path of a file holding it."""
        if isinstance(text_or_path, (str, os.PathLike)) and os.path.exists(text_or_path):
            return cls.from_file(text_or_path)
        return cls(text_or_path)

    @property
    def handle(self):
        return self._handle

    def __del__(self):
        h = getattr(self, "_handle", None)
        if h and lib is not None:
            lib.tsr_client_region_free(h)
            self._handle = None

    def __repr__(self):
        return "Region(%s, inputs=%r, output=%r)" % (self.kind, self.inputs, self.output)


def _region(r):
    return r if isinstance(r, Region) else Region(r)


def _compile_opts(arch=None, force=None, policy="tier", skip_verify=False, no_reference=False):
    if policy not in ("tier", "measure"):
        raise ValueError("policy is 'tier' or 'measure', got %r" % (policy,))
    return _lib.CompileOpts(_b(arch), _b(force), 1 if policy == "measure" else 0,
                            skip_verify, no_reference)


# ---- shared memory ----

class SharedMemory:
    """A POSIX shared-memory segment of this process (tsr_client_shm): the daemon
    on the same node reads and writes it directly. array(dtype, shape, offset)
    views its bytes as a numpy array. Freed (unlinked) by free() or collection."""

    def __init__(self, size):
        h = c_void_p()
        err = _lib.Error()
        _check(lib.tsr_client_shm_create(size, byref(h), byref(err)), err)
        self._h = h
        self.size = lib.tsr_client_shm_size(h)
        self.name = _s(lib.tsr_client_shm_name(h))
        addr = lib.tsr_client_shm_data(h)
        self._mem = (ctypes.c_uint8 * self.size).from_address(addr)

    def array(self, dtype, shape, offset=0):
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if offset < 0 or offset + n > self.size:
            raise TesseraError(Status.BUFFER_MISMATCH, "%d bytes at %d pass the end of %s"
                               % (n, offset, self.name))
        return np.frombuffer(self._mem, dtype=dt, count=n // dt.itemsize,
                             offset=offset).reshape(shape)

    @property
    def handle(self):
        return self._h

    def free(self):
        if getattr(self, "_h", None) and lib is not None:
            self._mem = None
            lib.tsr_client_shm_free(self._h)
            self._h = None

    def __del__(self):
        self.free()


def _align(n, a=256):
    return (n + a - 1) // a * a


# ---- buffers ----

class Buffer:
    """A daemon-side buffer owned by the client's connection. Freed by free(), by
    leaving a with block, or when the connection closes."""

    def __init__(self, client, handle, dtype, shape, nbytes):
        self.client = client
        self.handle = handle
        self.dtype = dtype
        self.shape = tuple(shape)
        self.nbytes = nbytes

    def write(self, array, offset=0):
        data = _to_wire(array, self.dtype)
        err = _lib.Error()
        shm = self.client._staging(data.nbytes)
        if shm is not None:
            with self.client._staging_lock:
                shm.array(np.uint8, (data.nbytes,))[:] = data.reshape(-1).view(np.uint8)
                _check(lib.tsr_client_buffer_write_shm(self.client._c, self.handle, offset,
                                                       shm.handle, 0, data.nbytes,
                                                       self.client.timeout_ms, byref(err)), err)
            return
        _check(lib.tsr_client_buffer_write(self.client._c, self.handle, offset,
                                           data.ctypes.data, data.nbytes,
                                           self.client.timeout_ms, byref(err)), err)

    def read(self):
        raw = np.empty(self.shape, dtype=_NUMPY_DTYPES[self.dtype])
        got = c_size_t()
        err = _lib.Error()
        shm = self.client._staging(raw.nbytes)
        if shm is not None:
            with self.client._staging_lock:
                _check(lib.tsr_client_buffer_read_shm(self.client._c, self.handle, 0, shm.handle,
                                                      0, raw.nbytes, self.client.timeout_ms,
                                                      byref(err)), err)
                raw.reshape(-1).view(np.uint8)[:] = shm.array(np.uint8, (raw.nbytes,))
            return _from_wire(raw, self.dtype)
        _check(lib.tsr_client_buffer_read(self.client._c, self.handle, 0, raw.ctypes.data,
                                          raw.nbytes, byref(got), self.client.timeout_ms,
                                          byref(err)), err)
        if got.value != raw.nbytes:
            raise TesseraError(Status.BUFFER_MISMATCH, "read %d of %d bytes"
                               % (got.value, raw.nbytes))
        return _from_wire(raw, self.dtype)

    def free(self):
        if self.handle:
            err = _lib.Error()
            h, self.handle = self.handle, 0
            _check(lib.tsr_client_buffer_free(self.client._c, h, self.client.timeout_ms,
                                              byref(err)), err)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.handle and self.client._c:
            self.free()

    def __repr__(self):
        return "Buffer(%#x, %s, %r)" % (self.handle, self.dtype, self.shape)


# ---- the client ----

def _is_torch(x):
    return type(x).__module__.startswith("torch")


class Client:
    """A connection to one tesserad. url: None means $TESSERA_URL, else the
    default ipc socket. timeout_ms: per-call default (0 = the library's 30 s)."""

    def __init__(self, url=None, timeout_ms=0, auth=None, force=None, lazy=False,
                 shm_threshold=None):
        opts = _lib.Options()
        lib.tsr_client_options_init(byref(opts))
        self._keep = [_b(url), _b(auth), _b(force)]
        opts.url, opts.auth, opts.force = self._keep
        opts.timeout_ms = timeout_ms
        opts.lazy = lazy
        handle = c_void_p()
        err = _lib.Error()
        _check(lib.tsr_client_connect(byref(opts), byref(handle), byref(err)), err)
        self._c = handle
        self.timeout_ms = 0
        self.url = _s(lib.tsr_client_url(handle))
        if shm_threshold is None:
            shm_threshold = int(os.environ.get("TESSERA_SHM_THRESHOLD", SHM_THRESHOLD_DEFAULT))
        # Shared memory needs the daemon on this node: ipc:// only.
        self.shm_threshold = shm_threshold if self.url.startswith("ipc://") else 0
        self._shm = None
        self._staging_lock = threading.Lock()
        # CUDA IPC imports and compiled kernels kept for reuse (torch_support).
        self._imports = collections.OrderedDict()
        self._kernels = {}
        self._cache_lock = threading.Lock()

    def _staging(self, nbytes):
        """The client's staging segment when nbytes should travel by shared
        memory, grown to fit (callers hold _staging_lock while using it)."""
        if self.shm_threshold <= 0 or nbytes < self.shm_threshold:
            return None
        with self._staging_lock:
            if self._shm is None or self._shm.size < nbytes:
                size = 1 << max(20, (nbytes - 1).bit_length())
                self._shm = SharedMemory(size)
            return self._shm

    IMPORTS_MAX = 256

    def compiled(self, region, **opts):
        """compile(), remembered per region and options for this connection."""
        r = _region(region)
        key = (r.json, tuple(sorted(opts.items())))
        with self._cache_lock:
            k = self._kernels.get(key)
        if k is None:
            k = self.compile(r, **opts)
            with self._cache_lock:
                self._kernels[key] = k
        return k

    def imported(self, ipc_handle, nbytes, dtype, shape, offset=0):
        """import_cuda(), remembered: the same allocation, offset, dtype and shape
        give the same Buffer (an IPC handle names one allocation for its whole
        life, so a remembered import never points at other memory). At most
        IMPORTS_MAX are kept; release_imports() frees them all, and must be called
        before the exporter returns the memory to the driver
        (torch.cuda.empty_cache())."""
        key = (bytes(ipc_handle), nbytes, offset, dtype, tuple(shape))
        with self._cache_lock:
            b = self._imports.get(key)
            if b is not None:
                self._imports.move_to_end(key)
                return b
        b = self.import_cuda(ipc_handle, nbytes, dtype, shape, offset=offset)
        old = None
        with self._cache_lock:
            self._imports[key] = b
            if len(self._imports) > self.IMPORTS_MAX:
                old = self._imports.popitem(last=False)[1]
        if old is not None:
            old.free()
        return b

    def release_imports(self):
        """Frees every remembered CUDA IPC import (the daemon closes its mappings)."""
        with self._cache_lock:
            bufs = list(self._imports.values())
            self._imports.clear()
        for b in bufs:
            b.free()

    def close(self):
        if self._c:
            lib.tsr_client_close(self._c)
            self._c = None
        if getattr(self, "_shm", None) is not None:
            self._shm.free()
            self._shm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_c", None) and lib is not None:
            self.close()

    def hello(self):
        """The daemon's hello as a dict (versions, backend, devices, tenant)."""
        info = _lib.Info()
        err = _lib.Error()
        _check(lib.tsr_client_hello(self._c, byref(info), self.timeout_ms, byref(err)), err)
        return {
            "daemon_version": _s(info.daemon_version),
            "protocol_version": info.protocol_version,
            "backend": _s(info.backend),
            "devices": [{"index": d.index, "name": _s(d.name), "arch": _s(d.arch),
                         "memory_bytes": d.memory_bytes, "multiprocessors": d.multiprocessors}
                        for d in info.devices[:info.n_devices]],
            "driver_version": _s(info.driver_version),
            "compiler_version": _s(info.compiler_version),
            "tenant": _s(info.tenant),
            "max_message_bytes": info.max_message_bytes,
            "nng_version": _s(info.nng_version),
        }

    def compile(self, region, **opts):
        """Compiles the arbiter's pick for region (arch=, force=, policy=,
        skip_verify=, no_reference=). Returns a Compiled (kernel, key, decision)."""
        r = _region(region)
        o = _compile_opts(**opts)
        out = _lib.Compiled()
        err = _lib.Error()
        _check(lib.tsr_client_compile(self._c, r.handle, byref(o), byref(out), self.timeout_ms,
                                      byref(err)), err)
        return Compiled(out)

    def launch(self, kernel, inputs, output):
        """Launches a compiled kernel (a Compiled or its handle) on Buffers; returns
        the device time in ms."""
        k = kernel.kernel if isinstance(kernel, Compiled) else int(kernel)
        handles = (c_uint64 * max(1, len(inputs)))(*[b.handle for b in inputs])
        ms = c_double()
        err = _lib.Error()
        _check(lib.tsr_client_launch(self._c, k, handles, len(inputs), output.handle, byref(ms),
                                     self.timeout_ms, byref(err)), err)
        return ms.value

    def kernel_free(self, kernel):
        """Drops a compiled kernel (a Compiled or its handle); the daemon unloads
        it once no launch still uses it, and compiled() forgets it. Raises
        TesseraError NOT_FOUND for an unknown, foreign or already freed handle."""
        k = kernel.kernel if isinstance(kernel, Compiled) else int(kernel)
        with self._cache_lock:
            for key in [key for key, v in self._kernels.items() if v.kernel == k]:
                del self._kernels[key]
        err = _lib.Error()
        _check(lib.tsr_client_kernel_free(self._c, k, self.timeout_ms, byref(err)), err)

    def run(self, region, inputs, with_decision=False, **opts):
        """Compiles and runs region on inputs (numpy arrays or anything
        np.asarray takes, in signature order; bf16 inputs as float32). Returns the
        output as a numpy array (float32 for bf16), and the Decision too when
        with_decision. torch tensors go through tessera.torch_run instead."""
        r = _region(region)
        if any(_is_torch(x) for x in inputs):
            from . import torch_support
            return torch_support.run(self, r, inputs, with_decision=with_decision, **opts)
        if len(inputs) != len(r.inputs):
            raise TesseraError(Status.INVALID_ARGUMENT, "region takes %d inputs, got %d"
                               % (len(r.inputs), len(inputs)))
        wire = []
        for spec, x in zip(r.inputs, inputs):
            a = np.asarray(x)
            if a.size != int(np.prod(spec.shape, dtype=np.int64)):
                raise TesseraError(Status.BUFFER_MISMATCH, "input %s: %d elements, want shape %r"
                                   % (spec.name, a.size, spec.shape))
            wire.append(_to_wire(a, spec.dtype))
        out = np.empty(r.output.shape, dtype=_NUMPY_DTYPES[r.output.dtype])
        o = _compile_opts(**opts)
        d = _lib.Decision()
        err = _lib.Error()
        offsets, at = [], 0
        for w in wire:
            offsets.append(at)
            at = _align(at + w.nbytes)
        total = at + out.nbytes
        shm = self._staging(total)
        if shm is not None:
            with self._staging_lock:
                for w, off in zip(wire, offsets):
                    shm.array(np.uint8, (w.nbytes,), off)[:] = w.reshape(-1).view(np.uint8)
                offs = (c_uint64 * max(1, len(offsets)))(*offsets)
                _check(lib.tsr_client_run_shm(self._c, r.handle, byref(o), shm.handle, offs, at,
                                              byref(d), self.timeout_ms, byref(err)), err)
                out.reshape(-1).view(np.uint8)[:] = shm.array(np.uint8, (out.nbytes,), at)
            y = _from_wire(out, r.output.dtype)
            return (y, Decision(d)) if with_decision else y
        ptrs = (c_void_p * max(1, len(wire)))(*[w.ctypes.data for w in wire])
        _check(lib.tsr_client_run(self._c, r.handle, byref(o), ptrs, out.ctypes.data, byref(d),
                                  self.timeout_ms, byref(err)), err)
        y = _from_wire(out, r.output.dtype)
        return (y, Decision(d)) if with_decision else y

    def verify(self, region, candidate=None, seed=0, random_probes=0, **opts):
        r = _region(region)
        v = _lib.VerifyOpts(_b(candidate), seed, random_probes, _compile_opts(**opts))
        out = _lib.Verified()
        err = _lib.Error()
        _check(lib.tsr_client_verify(self._c, r.handle, byref(v), byref(out), self.timeout_ms,
                                     byref(err)), err)
        return {"candidate": _s(out.candidate), "tier": out.tier, "verdict": Verdict(out.verdict)}

    def candidates(self, region, **opts):
        r = _region(region)
        o = _compile_opts(**opts)
        rows = ctypes.POINTER(_lib.Candidate)()
        n = c_size_t()
        err = _lib.Error()
        _check(lib.tsr_client_candidates(self._c, r.handle, byref(o), byref(rows), byref(n),
                                         self.timeout_ms, byref(err)), err)
        try:
            return [{"name": _s(x.name), "tier": x.tier, "version": x.version,
                     "applies": x.applies, "why": _s(x.why), "verdict": Verdict(x.verdict),
                     "selected": x.selected} for x in rows[:n.value]]
        finally:
            lib.tsr_client_candidates_free(rows)

    def buffer(self, dtype, shape):
        """Allocates a Buffer of dtype ("f32", "f16", "bf16") and shape."""
        if dtype not in DTYPES:
            raise TesseraError(Status.BAD_DTYPE, "unknown dtype %r" % (dtype,))
        dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        h = c_uint64()
        nbytes = c_uint64()
        err = _lib.Error()
        _check(lib.tsr_client_buffer_alloc(self._c, DTYPES.index(dtype), len(shape), dims,
                                           byref(h), byref(nbytes), self.timeout_ms,
                                           byref(err)), err)
        return Buffer(self, h.value, dtype, shape, nbytes.value)

    def batch(self, launches, graph=False):
        """Runs launches — (kernel, [input Buffers], output Buffer) tuples — in order
        with one round trip. graph=True lets a CUDA daemon capture and replay the
        sequence. Returns {"device_ms", "launched", "graph_replayed"}."""
        descs = (_lib.LaunchDesc * max(1, len(launches)))()
        keep = []
        for i, (k, ins, out) in enumerate(launches):
            hs = (c_uint64 * max(1, len(ins)))(*[b.handle for b in ins])
            keep.append(hs)
            kern = k.kernel if isinstance(k, Compiled) else int(k)
            descs[i] = _lib.LaunchDesc(kern, len(ins), hs, out.handle)
        res = _lib.BatchResult()
        err = _lib.Error()
        _check(lib.tsr_client_batch(self._c, descs, len(launches), graph, byref(res),
                                    self.timeout_ms, byref(err)), err)
        return {"device_ms": res.device_ms, "launched": res.launched,
                "graph_replayed": res.graph_replayed}

    def import_cuda(self, ipc_handle, nbytes, dtype, shape, offset=0):
        """A Buffer over another process's device allocation (CUDA IPC): the
        64-byte cudaIpcMemHandle, the allocation's size, where the tensor starts
        in it. Launches use that memory in place; free() closes the mapping and
        leaves the memory to its owner, who must keep it alive until then."""
        if len(ipc_handle) != 64:
            raise TesseraError(Status.INVALID_ARGUMENT, "a CUDA IPC handle has 64 bytes, got %d"
                               % len(ipc_handle))
        if dtype not in DTYPES:
            raise TesseraError(Status.BAD_DTYPE, "unknown dtype %r" % (dtype,))
        dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        h = c_uint64()
        err = _lib.Error()
        _check(lib.tsr_client_buffer_import(self._c, bytes(ipc_handle), nbytes, offset,
                                            DTYPES.index(dtype), len(shape), dims, byref(h),
                                            self.timeout_ms, byref(err)), err)
        return Buffer(self, h.value, dtype, shape,
                      int(np.prod(shape, dtype=np.int64)) * (2 if dtype != "f32" else 4))

    def stats(self):
        """The daemon's counters as a dict name -> value."""
        s = ctypes.POINTER(_lib.Stats)()
        err = _lib.Error()
        _check(lib.tsr_client_stats_get(self._c, False, byref(s), self.timeout_ms, byref(err)),
               err)
        try:
            st = s.contents
            return {_s(c.name): c.value for c in st.counters[:st.n_counters]}
        finally:
            lib.tsr_client_stats_free(s)

    def cache_list(self):
        rows = ctypes.POINTER(_lib.CacheEntry)()
        n = c_size_t()
        err = _lib.Error()
        _check(lib.tsr_client_cache_list(self._c, byref(rows), byref(n), self.timeout_ms,
                                         byref(err)), err)
        try:
            return [{"key": _s(e.key), "candidate": _s(e.candidate), "kind": _s(e.kind),
                     "arch": _s(e.arch), "bytes": e.bytes, "hits": e.hits}
                    for e in rows[:n.value]]
        finally:
            lib.tsr_client_cache_free(rows)

    def cache_evict(self, key):
        n = c_uint32()
        err = _lib.Error()
        _check(lib.tsr_client_cache_evict(self._c, key.encode(), byref(n), self.timeout_ms,
                                          byref(err)), err)
        return n.value


def connect(url=None, **kw):
    """A new Client (see Client)."""
    return Client(url, **kw)


_default = {}
_default_lock = threading.Lock()


def default_client():
    """One shared Client per process, connected on first use to $TESSERA_URL."""
    with _default_lock:
        c = _default.get("client")
        if c is None:
            c = _default["client"] = Client()
        return c


def run(region, inputs, **opts):
    """Client.run on the process's default client."""
    return default_client().run(region, inputs, **opts)
