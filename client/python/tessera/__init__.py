"""tessera — the Python client of tesserad.

A thin layer over libtessera-client (loaded with ctypes; tessera._lib says where
it is looked for). numpy arrays go in and come out; torch tensors are accepted
where numpy arrays are (see Client.run). Every failure is a TesseraError
carrying the status of the C side (Status) and its message.

    import tessera
    with tessera.connect("ipc:///run/tesserad/tesserad.sock") as c:
        region = tessera.Region({"kind": "pointwise", ...})
        y = c.run(region, [a, b])            # or {"a": a, "b": b}

Inputs are checked before anything is sent, as tessera-cli checks its .npy
files: the names (a dict is taken by name, a list in signature order), each
array's element type (float32, float16 or float64; anything else is
BAD_ATTRIBUTE) and its exact shape (BUFFER_MISMATCH).

Threading: a Client may be used from several threads at once (the C library runs
each call on its own request context); close it only when no call is running.
"""
from __future__ import annotations

import collections
import ctypes
import enum
import json
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from ctypes import byref, c_double, c_size_t, c_uint32, c_uint64, c_void_p
from typing import (Any, Callable, Dict, List, Literal, Optional, Tuple, TypedDict, TypeVar,
                    Union, overload)

import numpy as np
import numpy.typing as npt

from . import _lib
from ._lib import lib
from ._version import __version__

__all__ = ["__version__", "Status", "TesseraError", "SharedMemoryFallbackWarning", "Region",
           "TensorSpec", "Client", "Buffer", "Compiled", "Decision", "Verdict", "SharedMemory", "Ring",
           "connect", "run", "default_client", "f32_to_bf16_bits", "f64_to_bf16_bits",
           "bf16_bits_to_f32"]

# Host tensors at least this large go through a shared-memory segment instead of
# the message, on ipc:// connections ($TESSERA_SHM_THRESHOLD overrides; 0 = never).
SHM_THRESHOLD_DEFAULT = 256 << 10


class Status(enum.IntEnum):
    """The status codes of lib/include/tessera/status.h (the protocol's Status
    enum), by the names tessera-cli prints."""

    OK = 0
    INVALID_ARGUMENT = 1
    BAD_JSON = 2
    UNKNOWN_KIND = 3
    UNKNOWN_OP = 4
    BAD_ARITY = 5
    CYCLE = 6
    UNDEFINED_NAME = 7
    DUPLICATE_NAME = 8
    SHAPE_MISMATCH = 9
    BAD_DIMENSION = 10
    TOO_LARGE = 11
    BAD_HEADS = 12
    BAD_DTYPE = 13
    BAD_ATTRIBUTE = 14
    CONFLICT = 15
    NO_MEMORY = 16
    NOT_FOUND = 17
    ARBITER = 18
    VERIFY_FAILED = 19
    BAD_MESSAGE = 20
    UNKNOWN_REQUEST = 21
    MESSAGE_TOO_LARGE = 22
    BUFFER_MISMATCH = 23
    TIMEOUT = 24
    UNAVAILABLE = 25
    COMPILE_FAILED = 26
    DEVICE_LOST = 27
    UNAUTHENTICATED = 28
    RESOURCE_EXHAUSTED = 29
    UNSUPPORTED = 30
    IO_ERROR = 31
    CUDA_ERROR = 32
    INTERNAL = 33
    CORRUPT = 34
    CANCELLED = 35


def _check_status_names() -> None:
    for s in Status:
        name = lib.tsr_status_name(s.value).decode()
        if name != s.name:
            raise ImportError("tessera: %s calls status %d %s, this package %s: rebuild the "
                              "library and reinstall the package from one tree"
                              % (lib._name, s.value, name, s.name))


_check_status_names()

DTYPES = ("f32", "f16", "bf16")
_NUMPY_DTYPES: Dict[str, np.dtype[Any]] = {"f32": np.dtype("<f4"), "f16": np.dtype("<f2"),
                                           "bf16": np.dtype("<u2")}
# What an input may hold, as tessera-cli's .npy reader takes it.
_INPUT_TYPES = "<f4, <f2, <f8"

# What a region may be given as, and a run's inputs (a list in signature order
# or a dict by name).
RegionLike = Union["Region", Mapping[str, Any], str, bytes]
Inputs = Union[Sequence[Any], Mapping[str, Any]]
_T = TypeVar("_T")


class TesseraError(Exception):
    """A call failed. code is a Status (a plain int for a number this package
    does not know); message is the daemon's (or the library's) text, which
    names the field or handle at fault. str() is "STATUS_NAME: message", as
    tessera-cli prints it."""

    def __init__(self, code: int, message: str) -> None:
        try:
            code = Status(code)
        except ValueError:
            pass
        self.code = code
        self.message = message
        name = code.name if isinstance(code, Status) else str(code)
        super().__init__("%s: %s" % (name, message))


class SharedMemoryFallbackWarning(RuntimeWarning):
    """The daemon could not open this process's shared-memory segment (it sees
    another /dev/shm: another mount namespace, such as another container), so
    the client sends tensors inline from then on. Issued once per Client."""


def _check(status: int, err: _lib.Error) -> None:
    if status != 0:
        raise TesseraError(status, err.message.decode(errors="replace"))


def _s(b: bytes) -> str:
    return b.decode(errors="replace")


def _b(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else s.encode()


# ---- bf16 (numpy has no such dtype: bf16 data is float32 to Python) ----

def f32_to_bf16_bits(a: npt.ArrayLike) -> npt.NDArray[np.uint16]:
    """Rounds float32 values to bf16 (nearest even; NaN stays NaN, quiet), as
    uint16 bits: what the C library's tsr_f32_to_bf16 gives."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    bits: npt.NDArray[np.uint16] = np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)
    return bits


def f64_to_bf16_bits(a: npt.ArrayLike) -> npt.NDArray[np.uint16]:
    """Rounds float64 values to bf16 once (nearest even, never twice through
    float32), as uint16 bits: what the C library's tsr_f64_to_bf16 gives, and so
    what tessera-cli sends for a float64 .npy input of a bf16 region."""
    x = np.ascontiguousarray(a, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        r = x.astype(np.float32)
        back = r.astype(np.float64)
        # Round to odd in float32 (truncate toward zero, set the last bit when
        # inexact); rounding that to bf16's 8 bits is then the correct rounding.
        toward_zero = np.where(np.abs(back) > np.abs(x), np.nextafter(r, np.float32(0)), r)
    u = toward_zero.astype(np.float32).view(np.uint32) | (back != x).astype(np.uint32)
    bits: npt.NDArray[np.uint16] = ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(
        np.uint16)
    nan = np.isnan(x)
    if nan.any():
        b = x.view(np.uint64)
        quiet = ((b >> 48) & 0x8000) | 0x7FC0 | ((b >> 45) & 0x7F)
        bits = np.where(nan, quiet.astype(np.uint16), bits)
    return bits


def bf16_bits_to_f32(bits: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """The float32 values of bf16 bits (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _shape_text(shape: Sequence[int]) -> str:
    """A shape as the C library writes it in messages: "(64,128)"."""
    return "(" + ",".join(str(int(d)) for d in shape) + ")"


def _float_array(name: str, x: Any) -> npt.NDArray[Any]:
    """x as a numpy array of float32, float16 or float64, or BAD_ATTRIBUTE naming
    its element type as tessera-cli names an .npy file's ('<i8')."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise TesseraError(Status.INVALID_ARGUMENT, "%s: not an array: %s" % (name, e)) from None
    if a.dtype.kind != "f" or a.dtype.itemsize not in (2, 4, 8):
        raise TesseraError(Status.BAD_ATTRIBUTE, "%s: element type '%s' unsupported (need %s)"
                           % (name, a.dtype.str, _INPUT_TYPES))
    return a


def _to_wire(a: npt.NDArray[Any], dtype: str) -> npt.NDArray[Any]:
    """The dense little-endian bytes of a float array in a storage dtype (a
    contiguous numpy array whose buffer is passed to C). One rounding, as the C
    library rounds: float64 straight to f16 or bf16, never through float32."""
    if dtype == "bf16":
        return f64_to_bf16_bits(a) if a.dtype.itemsize == 8 else f32_to_bf16_bits(a)
    return np.ascontiguousarray(a, dtype=_NUMPY_DTYPES[dtype])


def _from_wire(raw: npt.NDArray[Any], dtype: str) -> npt.NDArray[Any]:
    return bf16_bits_to_f32(raw) if dtype == "bf16" else raw


# ---- results ----

class Verdict:
    """The oracle's verdict (docs/architecture.md, "Oracle"): state is "not_run",
    "pass" or "fail"; the errors measured against the CPU reference and the
    bound they must stay within; reason says why it failed. method is "full",
    or "sampled" for a region too large to check whole (sampled_elements
    compared at the real shape, small_probes run at a small shape)."""

    _STATES = ("not_run", "pass", "fail")

    def __init__(self, v: _lib.Verdict) -> None:
        self.state: str = self._STATES[v.state] if 0 <= v.state < 3 else str(v.state)
        self.elements: int = v.elements
        self.probes: int = v.probes
        self.max_abs_error: float = v.max_abs_error
        self.rel_error: float = v.rel_error
        self.bound: float = v.bound
        self.nan_mismatches: int = v.nan_mismatches
        self.inf_mismatches: int = v.inf_mismatches
        self.first_bad_index: int = v.first_bad_index
        self.reason: str = _s(v.reason)
        self.cached: bool = v.cached
        self.method: str = _s(v.method)
        self.sampled_elements: int = v.sampled_elements
        self.small_probes: int = v.small_probes

    @property
    def passed(self) -> bool:
        """True when the candidate passed the oracle."""
        return self.state == "pass"

    def __repr__(self) -> str:
        return "Verdict(%s, rel_error=%g, bound=%g)" % (self.state, self.rel_error, self.bound)


class Decision:
    """Why a candidate serves a region: candidate, tier, version, reason
    ("forced", "tier", "measured", "fallback"), verdict, cache_hit, cache_level
    ("memory", "disk", "shared" or "" on a miss), verify_skipped (chosen
    without verification: skip_verify)."""

    def __init__(self, d: _lib.Decision) -> None:
        self.candidate: str = _s(d.candidate)
        self.tier: int = d.tier
        self.version: int = d.version
        self.reason: str = _s(d.reason)
        self.verdict = Verdict(d.verdict)
        self.cache_hit: bool = d.cache_hit
        self.cache_level: str = _s(d.cache_level)
        self.verify_skipped: bool = d.verify_skipped

    def __repr__(self) -> str:
        return "Decision(%s, tier=%d, reason=%s)" % (self.candidate, self.tier, self.reason)


class Compiled:
    """A compiled kernel of this connection: kernel (the handle launch and batch
    take; 0 when compiled for another arch), key (the kernel cache's), the
    region's fingerprint, the Decision, binary_bytes and compile_ms (0 on a
    cache hit)."""

    def __init__(self, c: _lib.Compiled) -> None:
        self.kernel: int = c.kernel
        self.key: str = _s(c.key)
        self.fingerprint: str = _s(c.fingerprint)
        self.decision = Decision(c.decision)
        self.binary_bytes: int = c.binary_bytes
        self.compile_ms: float = c.compile_ms

    def __repr__(self) -> str:
        return "Compiled(%#x, %r)" % (self.kernel, self.decision)


class TensorSpec:
    """One tensor of a region's signature: name, dtype ("f32", "f16", "bf16"),
    shape (a tuple) and nbytes (its dense size in that dtype)."""

    def __init__(self, t: _lib.Tensor) -> None:
        self.name: str = _s(t.name)
        self.dtype: str = DTYPES[t.dtype]
        self.shape: Tuple[int, ...] = tuple(t.shape[i] for i in range(t.rank))
        self.nbytes: int = t.bytes

    def __repr__(self) -> str:
        return "TensorSpec(%r, %s, %r)" % (self.name, self.dtype, self.shape)


class HelloInfo(TypedDict):
    """Client.hello's answer."""

    daemon_version: str
    protocol_version: int
    backend: str
    devices: List[Dict[str, Any]]
    driver_version: str
    compiler_version: str
    tenant: str
    max_message_bytes: int
    nng_version: str


class Verified(TypedDict):
    """Client.verify's answer."""

    candidate: str
    tier: int
    verdict: Verdict


class CandidateRow(TypedDict):
    """One row of Client.candidates."""

    name: str
    tier: int
    version: int
    applies: bool
    why: str
    verdict: Verdict
    selected: bool


class CacheRow(TypedDict):
    """One row of Client.cache_list."""

    key: str
    candidate: str
    kind: str
    arch: str
    bytes: int
    hits: int
    origin: str


class BatchResult(TypedDict):
    """Client.batch's answer."""

    device_ms: float
    launched: int
    graph_replayed: bool


# ---- regions ----

class Region:
    """A validated region (docs/regions.md), built from a dict, JSON text or
    another Region; Region.from_json also takes the path of a .json file.

    The region is parsed and validated by the C library, so an invalid one raises
    TesseraError with the same code and message the daemon would give. inputs
    lists its signature (TensorSpec, in the order a list of inputs follows),
    output the tensor it writes, kind its kind and json its JSON text."""

    json: str

    def __init__(self, spec: RegionLike) -> None:
        if isinstance(spec, Region):
            spec = spec.json
        if isinstance(spec, Mapping):
            text = json.dumps(dict(spec))
        elif isinstance(spec, (str, bytes)):
            text = spec.decode() if isinstance(spec, bytes) else spec
        else:
            raise TypeError("Region wants a dict or JSON text, got %s" % type(spec).__name__)
        self.json = text
        raw = text.encode()
        handle = c_void_p()
        err = _lib.Error()
        _check(lib.tsr_client_region_load(raw, len(raw), byref(handle), byref(err)), err)
        self._handle: Optional[c_void_p] = handle
        ins = (_lib.Tensor * _lib.MAX_INPUTS)()
        out = _lib.Tensor()
        n = lib.tsr_client_region_signature(handle, ins, byref(out))
        self.inputs: List[TensorSpec] = [TensorSpec(ins[i]) for i in range(n)]
        self.output = TensorSpec(out)
        self.kind: Optional[str] = json.loads(text).get("kind")

    @classmethod
    def from_file(cls, path: Union[str, "os.PathLike[str]"]) -> "Region":
        """The region in a .json file."""
        with open(path, "r", encoding="utf-8") as f:
            return cls(f.read())

    @classmethod
    def from_json(cls, text_or_path: Union[str, "os.PathLike[str]"]) -> "Region":
        """JSON text, or the path of a file holding it."""
        if isinstance(text_or_path, os.PathLike) or os.path.exists(text_or_path):
            return cls.from_file(text_or_path)
        return cls(text_or_path)

    @property
    def handle(self) -> Optional[c_void_p]:
        """The C library's tsr_region pointer (valid while this object lives)."""
        return self._handle

    def __del__(self) -> None:
        h = getattr(self, "_handle", None)
        if h and lib is not None:
            lib.tsr_client_region_free(h)
            self._handle = None

    def __repr__(self) -> str:
        return "Region(%s, inputs=%r, output=%r)" % (self.kind, self.inputs, self.output)


def _region(r: RegionLike) -> Region:
    return r if isinstance(r, Region) else Region(r)


def _ordered_inputs(r: Region, inputs: Inputs) -> List[Any]:
    """inputs in signature order: a dict is taken by name, as tessera-cli takes
    its -i NAME=FILE options (an unknown or missing name is INVALID_ARGUMENT
    naming it), a list or tuple as it is, in signature order."""
    names = [t.name for t in r.inputs]
    reads = ", ".join(names)
    if isinstance(inputs, Mapping):
        for key in inputs:
            if not isinstance(key, str):
                raise TesseraError(Status.INVALID_ARGUMENT, "input names are strings, got %r"
                                   % (key,))
            if key not in names:
                raise TesseraError(Status.INVALID_ARGUMENT, "unknown input '%s' (the region "
                                   "reads: %s)" % (key, reads))
        for name in names:
            if name not in inputs:
                raise TesseraError(Status.INVALID_ARGUMENT, "missing input '%s' (the region "
                                   "reads: %s)" % (name, reads))
        return [inputs[name] for name in names]
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Sequence):
        raise TesseraError(Status.INVALID_ARGUMENT, "inputs are a list in signature order (%s) "
                           "or a dict by name, not %s" % (reads, type(inputs).__name__))
    if len(inputs) != len(names):
        raise TesseraError(Status.INVALID_ARGUMENT, "region takes %d inputs (%s), got %d"
                           % (len(names), reads, len(inputs)))
    return list(inputs)


def _compile_opts(arch: Optional[str] = None, force: Optional[str] = None, policy: str = "tier",
                  skip_verify: bool = False, no_reference: bool = False) -> _lib.CompileOpts:
    if policy not in ("tier", "measure"):
        raise ValueError("policy is 'tier' or 'measure', got %r" % (policy,))
    return _lib.CompileOpts(_b(arch), _b(force), 1 if policy == "measure" else 0,
                            skip_verify, no_reference)


# ---- shared memory ----

class SharedMemory:
    """A POSIX shared-memory segment of this process (tsr_client_shm): the daemon
    on the same node reads and writes it directly. array(dtype, shape, offset)
    views its bytes as a numpy array. Freed (unlinked) by free() or collection."""

    def __init__(self, size: int) -> None:
        h = c_void_p()
        err = _lib.Error()
        _check(lib.tsr_client_shm_create(size, byref(h), byref(err)), err)
        self._h: Optional[c_void_p] = h
        self.size: int = lib.tsr_client_shm_size(h)
        self.name: str = _s(lib.tsr_client_shm_name(h))
        addr = lib.tsr_client_shm_data(h)
        self._mem: Optional[ctypes.Array[ctypes.c_uint8]] = \
            (ctypes.c_uint8 * self.size).from_address(addr)

    def array(self, dtype: npt.DTypeLike, shape: Tuple[int, ...],
              offset: int = 0) -> npt.NDArray[Any]:
        """The segment's bytes at offset as a numpy array of dtype and shape (a
        view: writes land in the segment). BUFFER_MISMATCH past its end."""
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if offset < 0 or offset + n > self.size or self._mem is None:
            raise TesseraError(Status.BUFFER_MISMATCH, "%d bytes at %d pass the end of %s"
                               % (n, offset, self.name))
        view: npt.NDArray[Any] = np.frombuffer(memoryview(self._mem), dtype=dt,
                                               count=n // dt.itemsize, offset=offset)
        return view.reshape(shape)

    @property
    def handle(self) -> Optional[c_void_p]:
        """The C library's tsr_client_shm pointer (None once freed)."""
        return self._h

    def free(self) -> None:
        """Unmaps and unlinks the segment; arrays from array() must not be used
        after this."""
        if getattr(self, "_h", None) and lib is not None:
            self._mem = None
            lib.tsr_client_shm_free(self._h)
            self._h = None

    def __del__(self) -> None:
        self.free()


def _align(n: int, a: int = 256) -> int:
    return (n + a - 1) // a * a


def _daemon_cannot_open(e: TesseraError) -> bool:
    """The daemon failed to open a segment this process made: it sees another
    /dev/shm (NOT_FOUND), or may not open it there (IO_ERROR)."""
    return (e.code in (Status.NOT_FOUND, Status.IO_ERROR)
            and ".shm.name: shm_open " in e.message)


# ---- buffers ----

class Buffer:
    """A daemon-side buffer owned by the client's connection: handle, dtype
    ("f32", "f16", "bf16"), shape and nbytes. Freed by free(), by leaving a with
    block, or when the connection closes."""

    def __init__(self, client: "Client", handle: int, dtype: str, shape: Sequence[int],
                 nbytes: int, device: int = 0) -> None:
        self.client = client
        self.handle = handle
        self.dtype = dtype
        self.shape: Tuple[int, ...] = tuple(shape)
        self.nbytes = nbytes
        self.device = device  # where the daemon keeps it

    def write(self, array: npt.ArrayLike, offset: int = 0) -> None:
        """Writes array's values (float32, float16 or float64, rounded to the
        buffer's dtype as Client.run rounds inputs) at byte offset. BAD_ATTRIBUTE
        for another element type, BUFFER_MISMATCH past the buffer's end."""
        data = _to_wire(_float_array("buffer_write", array), self.dtype)
        c = self.client

        def through(shm: SharedMemory) -> None:
            shm.array(np.uint8, (data.nbytes,))[:] = data.reshape(-1).view(np.uint8)
            err = _lib.Error()
            _check(lib.tsr_client_buffer_write_shm(c._c, self.handle, offset, shm.handle, 0,
                                                   data.nbytes, c.timeout_ms, byref(err)), err)

        def inline() -> None:
            err = _lib.Error()
            _check(lib.tsr_client_buffer_write(c._c, self.handle, offset, data.ctypes.data,
                                               data.nbytes, c.timeout_ms, byref(err)), err)

        c._transfer(data.nbytes, through, inline)

    def read(self) -> npt.NDArray[Any]:
        """The buffer's contents as a numpy array of its shape: float32 for f32
        and bf16 buffers, float16 for f16 ones."""
        raw = np.empty(self.shape, dtype=_NUMPY_DTYPES[self.dtype])
        c = self.client

        def through(shm: SharedMemory) -> None:
            err = _lib.Error()
            _check(lib.tsr_client_buffer_read_shm(c._c, self.handle, 0, shm.handle, 0, raw.nbytes,
                                                  c.timeout_ms, byref(err)), err)
            raw.reshape(-1).view(np.uint8)[:] = shm.array(np.uint8, (raw.nbytes,))

        def inline() -> None:
            got = c_size_t()
            err = _lib.Error()
            _check(lib.tsr_client_buffer_read(c._c, self.handle, 0, raw.ctypes.data, raw.nbytes,
                                              byref(got), c.timeout_ms, byref(err)), err)
            if got.value != raw.nbytes:
                raise TesseraError(Status.BUFFER_MISMATCH, "read %d of %d bytes"
                                   % (got.value, raw.nbytes))

        c._transfer(raw.nbytes, through, inline)
        return _from_wire(raw, self.dtype)

    def free(self) -> None:
        """Frees the buffer on the daemon (NOT_FOUND when it is gone already)."""
        if self.handle:
            err = _lib.Error()
            h, self.handle = self.handle, 0
            _check(lib.tsr_client_buffer_free(self.client._c, h, self.client.timeout_ms,
                                              byref(err)), err)

    def __enter__(self) -> "Buffer":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handle and self.client._c:
            self.free()

    def __repr__(self) -> str:
        return "Buffer(%#x, %s, %r)" % (self.handle, self.dtype, self.shape)


# ---- the client ----

def _is_torch(x: object) -> bool:
    return type(x).__module__.startswith("torch")


def _shm_threshold_from_env() -> int:
    text = os.environ.get("TESSERA_SHM_THRESHOLD")
    if text is None or text == "":
        return SHM_THRESHOLD_DEFAULT
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise TesseraError(Status.INVALID_ARGUMENT, "TESSERA_SHM_THRESHOLD: '%s' is not a byte "
                           "count" % text)
    return value


def _launch_descs(launches: Sequence[Tuple[Union["Compiled", int], Sequence["Buffer"], "Buffer"]]
                  ) -> Tuple[Any, List[Any]]:
    """The C form of (kernel, [inputs], output) tuples, and the arrays it
    points into (keep them alive for the call)."""
    descs = (_lib.LaunchDesc * max(1, len(launches)))()
    keep = []
    for i, (k, ins, out) in enumerate(launches):
        hs = (c_uint64 * max(1, len(ins)))(*[b.handle for b in ins])
        keep.append(hs)
        kern = k.kernel if isinstance(k, Compiled) else int(k)
        descs[i] = _lib.LaunchDesc(kern, len(ins), hs, out.handle)
    return descs, keep


class Ring:
    """A submission ring of a Client (Client.ring): launch(i) runs binding i and
    returns its device time in ms; run([i, j, ...]) runs a sequence with one
    wait. Use from one thread at a time; close() (or the with-block's end) lets
    the daemon go of its kernels and buffers."""

    def __init__(self, client: "Client", handle: c_void_p, bindings: int) -> None:
        self._client = client  # the connection must outlive the ring
        self._h: Optional[c_void_p] = handle
        self.bindings = bindings
        self.launches = 0
        self._served = 0

    def launch(self, binding: int = 0, timeout_ms: int = 0) -> float:
        """Runs binding `binding` and waits for it (timeout_ms 0: the client's)."""
        if self._h is None:
            raise TesseraError(Status.INVALID_ARGUMENT, "ring: closed")
        ms = c_double()
        err = _lib.Error()
        _check(lib.tsr_client_ring_launch(self._h, binding, byref(ms), timeout_ms, byref(err)),
               err)
        self.launches += 1
        return ms.value

    def run(self, bindings: Sequence[int], timeout_ms: int = 0) -> float:
        """Runs the bindings in order and waits for all of them; returns their
        device time in ms, summed. The launches are submitted without waiting
        in between (up to the ring's slots at once), so the daemon sends those
        it finds waiting to the device together: open the ring with as many
        slots as a run has launches. Every launch runs; the first failure is
        raised, its index in the run in front ("ring_run[3]: ...")."""
        if self._h is None:
            raise TesseraError(Status.INVALID_ARGUMENT, "ring: closed")
        seq = (c_uint32 * max(len(bindings), 1))(*bindings)
        ms = c_double()
        err = _lib.Error()
        _check(lib.tsr_client_ring_run(self._h, seq, len(bindings), byref(ms), timeout_ms,
                                       byref(err)), err)
        self.launches += len(bindings)
        return ms.value

    def close(self) -> int:
        """Closes the ring; returns the slots the daemon served (again on a
        second call)."""
        if self._h is None:
            return self._served
        served = c_uint64()
        err = _lib.Error()
        h, self._h = self._h, None
        _check(lib.tsr_client_ring_close(h, byref(served), self._client.timeout_ms, byref(err)),
               err)
        self._served = served.value
        return self._served

    def __enter__(self) -> "Ring":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return "Ring(%d bindings, %d launches%s)" % (self.bindings, self.launches,
                                                     ", closed" if self._h is None else "")


class Client:
    """A connection to one tesserad.

    url: None means $TESSERA_URL, else ipc:///run/tesserad/tesserad.sock.
    timeout_ms: the per-call default (0 = the library's 30 s). auth: the bearer
    token (None: $TESSERA_TOKEN). force: "kind=name,..." (None:
    $TESSERA_FORCE; "": none). lazy: do not fail when the daemon is not up yet.
    shm_threshold: host tensors of at least this many bytes travel through a
    shared-memory segment on ipc:// connections (None: $TESSERA_SHM_THRESHOLD,
    else 256 KiB; 0: never). When the daemon cannot open the segment, the
    client warns once (SharedMemoryFallbackWarning), sets shm_threshold to 0,
    keeps the cause in shm_fallback and sends that call and every later one
    inline. spin_us: how long a call busy-waits for its reply before sleeping
    (set_spin; None: the library's default or $TESSERA_SPIN_US)."""

    IMPORTS_MAX = 256

    def __init__(self, url: Optional[str] = None, timeout_ms: int = 0,
                 auth: Optional[str] = None, force: Optional[str] = None, lazy: bool = False,
                 shm_threshold: Optional[int] = None, spin_us: Optional[int] = None) -> None:
        self._c: Optional[c_void_p] = None
        if spin_us is not None and (isinstance(spin_us, bool) or not isinstance(spin_us, int)):
            raise TypeError("spin_us: an int of microseconds, got %r" % (spin_us,))
        if shm_threshold is None:
            shm_threshold = _shm_threshold_from_env()
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
        if spin_us is not None:
            try:
                self.set_spin(spin_us)
            except TesseraError:
                self.close()
                raise
        self.url: str = _s(lib.tsr_client_url(handle))
        # Shared memory needs the daemon on this node: ipc:// only.
        self.shm_threshold: int = shm_threshold if self.url.startswith("ipc://") else 0
        # The failure that turned shared memory off for this client (warned once).
        self.shm_fallback: Optional[TesseraError] = None
        self._shm: Optional[SharedMemory] = None
        self._staging_lock = threading.Lock()
        # CUDA IPC imports and compiled kernels kept for reuse (torch_support).
        self._imports: "collections.OrderedDict[Any, Buffer]" = collections.OrderedDict()
        self._kernels: Dict[Any, Compiled] = {}
        self._cache_lock = threading.Lock()

    def _staging(self, nbytes: int) -> Optional[SharedMemory]:
        """The client's staging segment when nbytes should travel by shared
        memory, grown to fit; the caller holds _staging_lock while using it."""
        if self.shm_threshold <= 0 or nbytes < self.shm_threshold:
            return None
        if self._shm is None or self._shm.size < nbytes:
            size = 1 << max(20, (nbytes - 1).bit_length())
            self._shm = SharedMemory(size)
        return self._shm

    def _transfer(self, nbytes: int, through: Callable[[SharedMemory], _T],
                  inline: Callable[[], _T]) -> _T:
        """through(segment) when nbytes should go by shared memory, else (or when
        the daemon cannot open the segment: then once a warning, and inline for
        good) inline()."""
        if 0 < self.shm_threshold <= nbytes:
            with self._staging_lock:
                shm = self._staging(nbytes)  # None when another call just fell back
                if shm is not None:
                    try:
                        return through(shm)
                    except TesseraError as e:
                        if not _daemon_cannot_open(e):
                            raise
                        self._fall_back_inline(e)
        return inline()

    def _fall_back_inline(self, e: TesseraError) -> None:
        """Turns shared memory off for this client and warns, once (the caller
        holds _staging_lock)."""
        self.shm_threshold = 0
        if self._shm is not None:
            self._shm.free()
            self._shm = None
        if self.shm_fallback is None:
            self.shm_fallback = e
            warnings.warn(
                "tessera: the daemon at %s cannot open this process's shared memory (%s); it "
                "sees another /dev/shm (another mount namespace, such as another container). "
                "This client sends tensors inline from now on; share /dev/shm with the daemon "
                "for the faster path, or set TESSERA_SHM_THRESHOLD=0 to go inline from the "
                "start." % (self.url, e), SharedMemoryFallbackWarning, stacklevel=4)

    def compiled(self, region: RegionLike, *, arch: Optional[str] = None,
                 force: Optional[str] = None, policy: str = "tier", skip_verify: bool = False,
                 no_reference: bool = False) -> Compiled:
        """compile(), remembered per region and options for this connection
        (kernel_free forgets it)."""
        r = _region(region)
        key = (r.json, arch, force, policy, skip_verify, no_reference)
        with self._cache_lock:
            k = self._kernels.get(key)
        if k is None:
            k = self.compile(r, arch=arch, force=force, policy=policy, skip_verify=skip_verify,
                             no_reference=no_reference)
            with self._cache_lock:
                self._kernels[key] = k
        return k

    def imported(self, ipc_handle: bytes, nbytes: int, dtype: str, shape: Sequence[int],
                 offset: int = 0) -> Buffer:
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

    def release_imports(self) -> None:
        """Frees every remembered CUDA IPC import (the daemon closes its mappings)."""
        with self._cache_lock:
            bufs = list(self._imports.values())
            self._imports.clear()
        for b in bufs:
            b.free()

    def close(self) -> None:
        """Closes the connection (the daemon frees its buffers and kernels) and
        the client's shared-memory segment. Only when no call is running."""
        if self._c:
            lib.tsr_client_close(self._c)
            self._c = None
        shm = getattr(self, "_shm", None)
        if shm is not None:
            shm.free()
            self._shm = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_c", None) and lib is not None:
            self.close()

    def set_spin(self, us: int) -> None:
        """How long each later call busy-waits for its reply before its thread
        sleeps, in microseconds (0: none; at most 1 000 000). Waking a sleeping
        thread can take longer than a short request takes to answer; the spin
        costs this thread's CPU only while the reply is not there. The default
        is 1000 where the process may run on 8 or more CPUs, else 0; $TESSERA_SPIN_US sets
        it at connect. INVALID_ARGUMENT outside the range."""
        err = _lib.Error()
        _check(lib.tsr_client_set_spin(self._c, int(us), byref(err)), err)

    def hello(self) -> "HelloInfo":
        """The daemon's hello as a dict: daemon_version, protocol_version,
        backend, devices, driver_version, compiler_version, tenant,
        max_message_bytes, nng_version."""
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

    def devices(self) -> List[Dict[str, Any]]:
        """Every device of the daemon with its load, as dicts: index, name,
        arch, memory_bytes, multiprocessors, memory_used_bytes, buffers and
        queue_depth (requests bound to it, queued or running)."""
        rows = (_lib.DeviceLoad * _lib.MAX_DEVICES)()
        n = ctypes.c_int()
        err = _lib.Error()
        _check(lib.tsr_client_devices(self._c, rows, _lib.MAX_DEVICES, byref(n), self.timeout_ms,
                                      byref(err)), err)
        return [{"index": d.index, "name": _s(d.name), "arch": _s(d.arch),
                 "memory_bytes": d.memory_bytes, "multiprocessors": d.multiprocessors,
                 "memory_used_bytes": d.memory_used_bytes, "buffers": d.buffers,
                 "queue_depth": d.queue_depth}
                for d in rows[:min(n.value, _lib.MAX_DEVICES)]]

    def health(self) -> Dict[str, Any]:
        """The daemon's health (needs no token), as a dict: state ("ready",
        "recovering", "draining" or "unknown"), uptime_ms, sessions,
        recoveries, and devices: per device its index, state ("serving",
        "recovering", "lost" or "unknown"), recoveries and faults. The node stays
        "ready" while one device serves; a device that does not is in devices."""
        h = _lib.Health()
        err = _lib.Error()
        _check(lib.tsr_client_health_get(self._c, byref(h), self.timeout_ms, byref(err)), err)
        rows = (_lib.DeviceHealth * _lib.MAX_DEVICES)()
        n = ctypes.c_int()
        _check(lib.tsr_client_health_devices(self._c, rows, _lib.MAX_DEVICES, byref(n),
                                             self.timeout_ms, byref(err)), err)
        states = {1: "ready", 2: "recovering", 3: "draining"}
        device_states = {1: "serving", 2: "recovering", 3: "lost"}
        return {"state": states.get(h.state, "unknown"), "uptime_ms": h.uptime_ms,
                "sessions": h.sessions, "recoveries": h.recoveries,
                "devices": [{"index": d.index, "state": device_states.get(d.state, "unknown"),
                             "recoveries": d.recoveries, "faults": d.faults}
                            for d in rows[:min(n.value, _lib.MAX_DEVICES)]]}

    def compile(self, region: RegionLike, *, arch: Optional[str] = None,
                force: Optional[str] = None, policy: str = "tier", skip_verify: bool = False,
                no_reference: bool = False) -> Compiled:
        """Compiles the arbiter's pick for region. arch: compile for that
        architecture ("sm_90a") instead of the serving device's; force: the
        candidate to use (an unknown or inapplicable name is ARBITER); policy:
        "tier" or "measure"; skip_verify: verify no candidate (the decision says so);
        no_reference: never fall back to the tier-0 reference. Returns a
        Compiled (kernel, key, decision)."""
        r = _region(region)
        o = _compile_opts(arch, force, policy, skip_verify, no_reference)
        out = _lib.Compiled()
        err = _lib.Error()
        _check(lib.tsr_client_compile(self._c, r.handle, byref(o), byref(out), self.timeout_ms,
                                      byref(err)), err)
        return Compiled(out)

    def launch(self, kernel: Union[Compiled, int], inputs: Sequence[Buffer],
               output: Buffer) -> float:
        """Launches a compiled kernel (a Compiled or its handle) on Buffers, the
        inputs in signature order; returns the device time in ms. NOT_FOUND for
        an unknown kernel or buffer, BUFFER_MISMATCH for a buffer of the wrong
        size or dtype."""
        k = kernel.kernel if isinstance(kernel, Compiled) else int(kernel)
        handles = (c_uint64 * max(1, len(inputs)))(*[b.handle for b in inputs])
        ms = c_double()
        err = _lib.Error()
        _check(lib.tsr_client_launch(self._c, k, handles, len(inputs), output.handle, byref(ms),
                                     self.timeout_ms, byref(err)), err)
        return ms.value

    def kernel_free(self, kernel: Union[Compiled, int]) -> None:
        """Drops a compiled kernel (a Compiled or its handle); the daemon unloads
        it once no launch still uses it, and compiled() forgets it. Raises
        TesseraError NOT_FOUND for an unknown, foreign or already freed handle."""
        k = kernel.kernel if isinstance(kernel, Compiled) else int(kernel)
        with self._cache_lock:
            for key in [key for key, v in self._kernels.items() if v.kernel == k]:
                del self._kernels[key]
        err = _lib.Error()
        _check(lib.tsr_client_kernel_free(self._c, k, self.timeout_ms, byref(err)), err)

    @overload
    def run(self, region: RegionLike, inputs: Inputs, with_decision: "Literal[False]" = False,
            *, arch: Optional[str] = None, force: Optional[str] = None, policy: str = "tier",
            skip_verify: bool = False, no_reference: bool = False,
            device: Optional[int] = None) -> Any: ...

    @overload
    def run(self, region: RegionLike, inputs: Inputs, with_decision: "Literal[True]",
            *, arch: Optional[str] = None, force: Optional[str] = None, policy: str = "tier",
            skip_verify: bool = False, no_reference: bool = False,
            device: Optional[int] = None) -> Tuple[Any, Decision]: ...

    def run(self, region: RegionLike, inputs: Inputs, with_decision: bool = False,
            *, arch: Optional[str] = None, force: Optional[str] = None, policy: str = "tier",
            skip_verify: bool = False, no_reference: bool = False,
            device: Optional[int] = None) -> Union[Any, Tuple[Any, Decision]]:
        """Compiles and runs region on inputs and returns its output (and the
        Decision too when with_decision); the options are compile()'s. device
        runs it on that device (its data then travels inline); None lets the
        daemon place it on the least-loaded device the tenant may use.

        inputs: a list or tuple in signature order (region.inputs), or a dict
        by name; an unknown or missing name, or a list of the wrong length, is
        INVALID_ARGUMENT. Each input is a numpy array (or anything np.asarray
        takes) of float32, float16 or float64, rounded to the region's dtype to
        nearest even (bf16 inputs are float32 data); any other element type is
        BAD_ATTRIBUTE ("a: element type '<i8' unsupported (need <f4, <f2,
        <f8)"), a shape other than the signature's BUFFER_MISMATCH ("a: shape
        (64,128), expected (128,64)"): tessera-cli's codes and messages. The
        output is a numpy array of the output's shape: float32 for f32 and bf16
        outputs, float16 for f16.

        torch tensors are taken too (tessera.torch_support): CPU tensors travel
        as numpy arrays, CUDA tensors stay on the GPU (CUDA IPC), and the output
        is a torch tensor."""
        r = _region(region)
        ordered = _ordered_inputs(r, inputs)
        opts: Dict[str, Any] = {"arch": arch, "force": force, "policy": policy,
                                "skip_verify": skip_verify, "no_reference": no_reference}
        if device is not None and device < 0:
            raise TesseraError(Status.INVALID_ARGUMENT, "device %d: must be >= 0" % device)
        if any(_is_torch(x) for x in ordered):
            if device is not None:
                raise TesseraError(Status.UNSUPPORTED, "device: not with torch tensors")
            from . import torch_support
            return torch_support.run(self, r, ordered, with_decision=with_decision, **opts)
        wire = []
        for spec, x in zip(r.inputs, ordered):
            a = _float_array(spec.name, x)
            if a.shape != spec.shape:
                raise TesseraError(Status.BUFFER_MISMATCH, "%s: shape %s, expected %s"
                                   % (spec.name, _shape_text(a.shape), _shape_text(spec.shape)))
            wire.append(_to_wire(a, spec.dtype))
        out = np.empty(r.output.shape, dtype=_NUMPY_DTYPES[r.output.dtype])
        o = _compile_opts(arch, force, policy, skip_verify, no_reference)
        d = _lib.Decision()
        offsets, at = [], 0
        for w in wire:
            offsets.append(at)
            at = _align(at + w.nbytes)

        def through(shm: SharedMemory) -> None:
            for w, off in zip(wire, offsets):
                shm.array(np.uint8, (w.nbytes,), off)[:] = w.reshape(-1).view(np.uint8)
            offs = (c_uint64 * max(1, len(offsets)))(*offsets)
            err = _lib.Error()
            _check(lib.tsr_client_run_shm(self._c, r.handle, byref(o), shm.handle, offs, at,
                                          byref(d), self.timeout_ms, byref(err)), err)
            out.reshape(-1).view(np.uint8)[:] = shm.array(np.uint8, (out.nbytes,), at)

        def inline() -> None:
            ptrs = (c_void_p * max(1, len(wire)))(*[w.ctypes.data for w in wire])
            err = _lib.Error()
            _check(lib.tsr_client_run_on(self._c, r.handle, byref(o),
                                         -1 if device is None else device, ptrs,
                                         out.ctypes.data, byref(d), None, self.timeout_ms,
                                         byref(err)), err)

        if device is None:
            self._transfer(at + out.nbytes, through, inline)
        else:
            inline()
        y = _from_wire(out, r.output.dtype)
        return (y, Decision(d)) if with_decision else y

    def verify(self, region: RegionLike, candidate: Optional[str] = None, seed: int = 0,
               random_probes: int = 0, *, arch: Optional[str] = None, policy: str = "tier",
               no_reference: bool = False) -> "Verified":
        """Runs the oracle on a candidate for region (candidate None: the
        arbiter's pick) with probe inputs from seed (0: the daemon's default)
        and random_probes more (0: the daemon's default), as `tessera-cli
        verify`. A failing verdict is a result, not an error. Returns a dict:
        candidate, tier, verdict (a Verdict)."""
        r = _region(region)
        v = _lib.VerifyOpts(_b(candidate), seed, random_probes,
                            _compile_opts(arch, None, policy, False, no_reference))
        out = _lib.Verified()
        err = _lib.Error()
        _check(lib.tsr_client_verify(self._c, r.handle, byref(v), byref(out), self.timeout_ms,
                                     byref(err)), err)
        return {"candidate": _s(out.candidate), "tier": out.tier, "verdict": Verdict(out.verdict)}

    def candidates(self, region: RegionLike, *, arch: Optional[str] = None,
                   force: Optional[str] = None, policy: str = "tier", skip_verify: bool = False,
                   no_reference: bool = False) -> "List[CandidateRow]":
        """Every candidate registered for region's kind and what the arbiter
        thinks of it, as `tessera-cli candidates`: a list of dicts with name,
        tier, version, applies, why (the reason it was or was not selected),
        verdict (a Verdict) and selected (exactly one is)."""
        r = _region(region)
        o = _compile_opts(arch, force, policy, skip_verify, no_reference)
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

    def buffer(self, dtype: str, shape: Sequence[int], device: Optional[int] = None) -> Buffer:
        """Allocates a Buffer of dtype ("f32", "f16", "bf16") and shape on
        device (None: the least-loaded device the tenant may use; the Buffer's
        device says which). BAD_DTYPE for another dtype, BAD_DIMENSION for a bad
        shape, NOT_FOUND for a device the daemon lacks, RESOURCE_EXHAUSTED for
        one outside the tenant's devices. A launch runs on its buffers' device:
        buffers of two devices in one launch are CONFLICT."""
        if dtype not in DTYPES:
            raise TesseraError(Status.BAD_DTYPE, "unknown dtype %r" % (dtype,))
        if device is not None and device < 0:
            raise TesseraError(Status.INVALID_ARGUMENT, "device %d: must be >= 0" % device)
        dims = (ctypes.c_int64 * max(1, len(shape)))(*shape)
        h = c_uint64()
        nbytes = c_uint64()
        placed = ctypes.c_int()
        err = _lib.Error()
        _check(lib.tsr_client_buffer_alloc_on(self._c, DTYPES.index(dtype), len(shape), dims,
                                              -1 if device is None else device, byref(h),
                                              byref(nbytes), byref(placed), self.timeout_ms,
                                              byref(err)), err)
        return Buffer(self, h.value, dtype, shape, nbytes.value, placed.value)

    def batch(self, launches: Sequence[Tuple[Union[Compiled, int], Sequence[Buffer], Buffer]],
              graph: bool = False) -> "BatchResult":
        """Runs launches — (kernel, [input Buffers], output Buffer) tuples — in order
        with one round trip. graph=True lets a CUDA daemon capture and replay the
        sequence. Returns {"device_ms", "launched", "graph_replayed"}."""
        descs, keep = _launch_descs(launches)
        res = _lib.BatchResult()
        err = _lib.Error()
        _check(lib.tsr_client_batch(self._c, descs, len(launches), graph, byref(res),
                                    self.timeout_ms, byref(err)), err)
        return {"device_ms": res.device_ms, "launched": res.launched,
                "graph_replayed": res.graph_replayed}

    def ring(self, launches: Sequence[Tuple[Union[Compiled, int], Sequence[Buffer], Buffer]],
             slots: int = 1) -> "Ring":
        """Opens a submission ring over launches — (kernel, [input Buffers],
        output Buffer) tuples, each checked as a launch is — for the same-node
        fast path: Ring.launch(i) runs launches[i] through shared memory, with
        no message (docs/protocol.md, "Submission rings"). Needs a local
        (ipc://) daemon. The ring holds one of the tenant's in_flight until
        closed; its launches are not ordered with this client's other calls."""
        descs, keep = _launch_descs(launches)
        handle = c_void_p()
        err = _lib.Error()
        _check(lib.tsr_client_ring_open(self._c, descs, len(launches), slots, byref(handle),
                                        self.timeout_ms, byref(err)), err)
        return Ring(self, handle, len(launches))

    def import_cuda(self, ipc_handle: bytes, nbytes: int, dtype: str, shape: Sequence[int],
                    offset: int = 0) -> Buffer:
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

    def stats(self) -> Dict[str, float]:
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

    def cache_list(self) -> "List[CacheRow]":
        """The daemon's kernel cache, as `tessera-cli cache ls`: a list of dicts
        with key (hex, for cache_evict), candidate, kind, arch, bytes, hits and
        origin, where the daemon got the entry: "compiled", "disk" or "fleet"
        ("" in a listing for a tenant that sees only its own entries)."""
        rows = ctypes.POINTER(_lib.CacheRow)()
        n = c_size_t()
        err = _lib.Error()
        _check(lib.tsr_client_cache_list_rows(self._c, byref(rows), byref(n), self.timeout_ms,
                                              byref(err)), err)
        try:
            return [{"key": _s(r.entry.key), "candidate": _s(r.entry.candidate),
                     "kind": _s(r.entry.kind), "arch": _s(r.entry.arch),
                     "bytes": r.entry.bytes, "hits": r.entry.hits, "origin": _s(r.origin)}
                    for r in rows[:n.value]]
        finally:
            lib.tsr_client_cache_rows_free(rows)

    def cache_evict(self, key: str) -> int:
        """Evicts one kernel cache entry by its hex key, or every entry with
        "all"; returns how many went. NOT_FOUND for an unknown key."""
        n = c_uint32()
        err = _lib.Error()
        _check(lib.tsr_client_cache_evict(self._c, key.encode(), byref(n), self.timeout_ms,
                                          byref(err)), err)
        return n.value


def connect(url: Optional[str] = None, **kw: Any) -> Client:
    """A new Client (see Client for the keyword arguments)."""
    return Client(url, **kw)


_default: Dict[str, Client] = {}
_default_lock = threading.Lock()


def default_client() -> Client:
    """One shared Client per process, connected on first use to $TESSERA_URL."""
    with _default_lock:
        c = _default.get("client")
        if c is None:
            c = _default["client"] = Client()
        return c


def run(region: RegionLike, inputs: Inputs, **opts: Any) -> Any:
    """Client.run on the process's default client (default_client())."""
    return default_client().run(region, inputs, **opts)
