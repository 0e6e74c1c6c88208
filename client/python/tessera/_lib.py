"""ctypes declarations of libtessera-client (client/include/tessera/client.h),
and where the library is found.

Only this module knows the C layout. The structs below mirror the header field
for field; a change there needs the same change here.

The library is looked for, in order (the first that loads wins):

1. ``$TESSERA_CLIENT_LIB``, when set: that file and nothing else;
2. next to the package: ``tessera/libtessera-client.so``, then
   ``tessera/lib/libtessera-client.so``;
3. in a source checkout (the package imported from ``client/python`` of the
   repository): ``$BUILD/client/libtessera-client.so`` at its top (``$BUILD``
   defaults to ``build``, where ``make`` puts it);
4. the system's library paths: the dynamic loader's search
   (``LD_LIBRARY_PATH``, the ldconfig cache, ``/lib``, ``/usr/lib``), then
   ``ctypes.util.find_library``, then ``/usr/local/lib`` (where
   ``make install`` puts it, before ``ldconfig`` has run).

When none loads, importing tessera raises ImportError saying what was tried
and what to build.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import (c_longlong, POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_int,
                    c_int64, c_size_t, c_uint, c_uint32, c_uint64, c_void_p)
from typing import Any, Dict, Iterator, List, Optional, Tuple

NAME_MAX = 64
TEXT_MAX = 256
KEY_MAX = 80
MAX_DEVICES = 16
MAX_RANK = 8
MAX_INPUTS = 16
ERROR_MESSAGE_MAX = 512
LIB_NAME = "libtessera-client.so"


class Error(Structure):
    _fields_ = [("code", c_int), ("message", c_char * ERROR_MESSAGE_MAX)]


class Options(Structure):
    _fields_ = [("url", c_char_p), ("timeout_ms", c_int), ("resend_ms", c_int),
                ("auth", c_char_p), ("force", c_char_p), ("max_message_bytes", c_size_t),
                ("lazy", c_bool)]


class Device(Structure):
    _fields_ = [("index", c_int), ("name", c_char * NAME_MAX), ("arch", c_char * NAME_MAX),
                ("memory_bytes", c_uint64), ("multiprocessors", c_int)]


class DeviceLoad(Structure):
    _fields_ = [("index", c_int), ("name", c_char * NAME_MAX), ("arch", c_char * NAME_MAX),
                ("memory_bytes", c_uint64), ("multiprocessors", c_int),
                ("memory_used_bytes", c_uint64), ("buffers", c_uint32), ("queue_depth", c_uint32)]


class Health(Structure):
    _fields_ = [("state", c_int), ("uptime_ms", c_uint64), ("sessions", c_uint32),
                ("recoveries", c_uint64)]


class DeviceHealth(Structure):
    _fields_ = [("index", c_int), ("state", c_int), ("recoveries", c_uint64),
                ("faults", c_uint64)]


class Info(Structure):
    _fields_ = [("daemon_version", c_char * NAME_MAX), ("protocol_version", c_uint32),
                ("backend", c_char * NAME_MAX), ("n_devices", c_int),
                ("devices", Device * MAX_DEVICES), ("driver_version", c_char * NAME_MAX),
                ("compiler_version", c_char * NAME_MAX), ("tenant", c_char * NAME_MAX),
                ("max_message_bytes", c_uint64), ("daemon_uid", c_uint32),
                ("nng_version", c_char * NAME_MAX)]


class Tensor(Structure):
    _fields_ = [("name", c_char * NAME_MAX), ("dtype", c_int), ("rank", c_int),
                ("shape", c_int64 * MAX_RANK), ("bytes", c_uint64)]


class CompileOpts(Structure):
    _fields_ = [("arch", c_char_p), ("force", c_char_p), ("policy", c_int),
                ("skip_verify", c_bool), ("no_reference", c_bool)]


class Verdict(Structure):
    _fields_ = [("state", c_int), ("elements", c_uint64), ("probes", c_int),
                ("max_abs_error", c_double), ("rel_error", c_double), ("bound", c_double),
                ("nan_mismatches", c_uint64), ("inf_mismatches", c_uint64),
                ("first_bad_index", c_int64), ("first_bad_probe", c_int),
                ("first_bad_got", c_double), ("first_bad_want", c_double),
                ("reason", c_char * TEXT_MAX), ("cached", c_bool),
                ("method", c_char * NAME_MAX), ("sampled_elements", c_uint64), ("small_probes", c_int)]


class Decision(Structure):
    _fields_ = [("candidate", c_char * NAME_MAX), ("tier", c_int), ("version", c_uint32),
                ("reason", c_char * NAME_MAX), ("verdict", Verdict), ("cache_hit", c_bool),
                ("cache_level", c_char * NAME_MAX), ("verify_skipped", c_bool)]


class Compiled(Structure):
    _fields_ = [("kernel", c_uint64), ("key", c_char * KEY_MAX),
                ("fingerprint", c_char * KEY_MAX), ("decision", Decision),
                ("binary_bytes", c_uint64), ("compile_ms", c_double)]


class VerifyOpts(Structure):
    _fields_ = [("candidate", c_char_p), ("seed", c_uint64), ("random_probes", c_int),
                ("compile", CompileOpts)]


class Verified(Structure):
    _fields_ = [("candidate", c_char * NAME_MAX), ("tier", c_int), ("verdict", Verdict)]


class Candidate(Structure):
    _fields_ = [("name", c_char * NAME_MAX), ("tier", c_int), ("version", c_uint32),
                ("applies", c_bool), ("why", c_char * TEXT_MAX), ("verdict", Verdict),
                ("selected", c_bool)]


class Counter(Structure):
    _fields_ = [("name", c_char * TEXT_MAX), ("value", c_double)]


class CandidateStats(Structure):
    _fields_ = [("kind", c_char * NAME_MAX), ("name", c_char * NAME_MAX), ("won", c_uint64),
                ("forced", c_uint64), ("declined", c_uint64),
                ("failed_verification", c_uint64), ("unverified", c_uint64)]


class Stats(Structure):
    _fields_ = [("n_counters", c_size_t), ("counters", POINTER(Counter)),
                ("n_candidates", c_size_t), ("candidates", POINTER(CandidateStats)),
                ("prometheus_text", c_char_p)]


class CacheEntry(Structure):
    _fields_ = [("key", c_char * KEY_MAX), ("candidate", c_char * NAME_MAX),
                ("kind", c_char * NAME_MAX), ("arch", c_char * NAME_MAX), ("bytes", c_uint64),
                ("in_memory", c_bool), ("on_disk", c_bool), ("last_used_unix_ms", c_int64),
                ("hits", c_uint64)]


class CacheRow(Structure):
    _fields_ = [("entry", CacheEntry), ("origin", c_char * NAME_MAX)]


class LaunchDesc(Structure):
    _fields_ = [("kernel", c_uint64), ("n_inputs", c_int), ("inputs", POINTER(c_uint64)),
                ("output", c_uint64)]


class BatchResult(Structure):
    _fields_ = [("device_ms", c_double), ("launched", c_uint32), ("graph_replayed", c_bool)]


HERE = os.path.dirname(os.path.abspath(__file__))


def _source_tree() -> Optional[str]:
    """The repository's top when this package is its client/python/tessera."""
    top = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
    if os.path.isfile(os.path.join(top, "client", "include", "tessera", "client.h")):
        return top
    return None


def candidates() -> Iterator[Tuple[str, str]]:
    """(where, path) pairs in the order the library is looked for; a bare
    file name is left to the dynamic loader's search."""
    env = os.environ.get("TESSERA_CLIENT_LIB")
    if env:
        yield "$TESSERA_CLIENT_LIB", env
        return
    yield "next to the package", os.path.join(HERE, LIB_NAME)
    yield "next to the package", os.path.join(HERE, "lib", LIB_NAME)
    top = _source_tree()
    if top is not None:
        yield "the source tree's build", os.path.join(top, os.environ.get("BUILD", "build"),
                                                     "client", LIB_NAME)
    yield "the system's library paths", LIB_NAME
    found = ctypes.util.find_library("tessera-client")
    if found and found != LIB_NAME:
        yield "ldconfig", found
    yield "make install's default prefix", os.path.join("/usr/local/lib", LIB_NAME)


def _load() -> ctypes.CDLL:
    tried: List[str] = []
    for where, path in candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s (%s: missing)" % (path, where))
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s: %s)" % (path, where, e))
    raise ImportError(
        "tessera: cannot load %s. Build it with `make` at the top of the tesserad "
        "repository (it is then build/client/%s) and set TESSERA_CLIENT_LIB to its path, "
        "or copy it into the installed package's folder, or install it with `make install "
        "PREFIX=/usr/local` and run ldconfig. Tried: %s" % (LIB_NAME, LIB_NAME, "; ".join(tried)))


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    P = c_void_p
    E = POINTER(Error)
    sig: Dict[str, Tuple[Any, List[Any]]] = {
        "tsr_status_name": (c_char_p, [c_int]),
        "tsr_strerror": (c_char_p, [c_int]),
        "tsr_client_options_init": (None, [POINTER(Options)]),
        "tsr_client_connect": (c_int, [POINTER(Options), POINTER(P), E]),
        "tsr_client_close": (None, [P]),
        "tsr_client_url": (c_char_p, [P]),
        "tsr_client_hello": (c_int, [P, POINTER(Info), c_int, E]),
        "tsr_client_region_load": (c_int, [c_char_p, c_size_t, POINTER(P), E]),
        "tsr_client_region_free": (None, [P]),
        "tsr_client_region_signature": (c_int, [P, POINTER(Tensor), POINTER(Tensor)]),
        "tsr_client_compile": (c_int, [P, P, POINTER(CompileOpts), POINTER(Compiled), c_int, E]),
        "tsr_client_launch": (c_int, [P, c_uint64, POINTER(c_uint64), c_int, c_uint64,
                                      POINTER(c_double), c_int, E]),
        "tsr_client_run": (c_int, [P, P, POINTER(CompileOpts), POINTER(c_void_p), c_void_p,
                                   POINTER(Decision), c_int, E]),
        "tsr_client_verify": (c_int, [P, P, POINTER(VerifyOpts), POINTER(Verified), c_int, E]),
        "tsr_client_candidates": (c_int, [P, P, POINTER(CompileOpts), POINTER(POINTER(Candidate)),
                                          POINTER(c_size_t), c_int, E]),
        "tsr_client_candidates_free": (None, [POINTER(Candidate)]),
        "tsr_client_buffer_alloc": (c_int, [P, c_int, c_int, POINTER(c_int64), POINTER(c_uint64),
                                            POINTER(c_uint64), c_int, E]),
        "tsr_client_buffer_alloc_on": (c_int, [P, c_int, c_int, POINTER(c_int64), c_int,
                                               POINTER(c_uint64), POINTER(c_uint64),
                                               POINTER(c_int), c_int, E]),
        "tsr_client_devices": (c_int, [P, POINTER(DeviceLoad), c_int, POINTER(c_int), c_int, E]),
        "tsr_client_health_get": (c_int, [P, POINTER(Health), c_int, E]),
        "tsr_client_health_devices": (c_int, [P, POINTER(DeviceHealth), c_int, POINTER(c_int),
                                              c_int, E]),
        "tsr_client_set_spin": (c_int, [P, c_longlong, E]),
        "tsr_client_run_on": (c_int, [P, P, POINTER(CompileOpts), c_int, POINTER(c_void_p),
                                      c_void_p, POINTER(Decision), POINTER(c_int), c_int, E]),
        "tsr_client_buffer_write": (c_int, [P, c_uint64, c_uint64, c_void_p, c_size_t, c_int, E]),
        "tsr_client_buffer_read": (c_int, [P, c_uint64, c_uint64, c_void_p, c_size_t,
                                           POINTER(c_size_t), c_int, E]),
        "tsr_client_buffer_free": (c_int, [P, c_uint64, c_int, E]),
        "tsr_client_kernel_free": (c_int, [P, c_uint64, c_int, E]),
        "tsr_client_stats_get": (c_int, [P, c_bool, POINTER(POINTER(Stats)), c_int, E]),
        "tsr_client_stats_free": (None, [POINTER(Stats)]),
        "tsr_client_cache_list": (c_int, [P, POINTER(POINTER(CacheEntry)), POINTER(c_size_t),
                                          c_int, E]),
        "tsr_client_cache_free": (None, [POINTER(CacheEntry)]),
        "tsr_client_cache_list_rows": (c_int, [P, POINTER(POINTER(CacheRow)), POINTER(c_size_t),
                                               c_int, E]),
        "tsr_client_cache_rows_free": (None, [POINTER(CacheRow)]),
        "tsr_client_cache_evict": (c_int, [P, c_char_p, POINTER(c_uint32), c_int, E]),
    }
    # The data plane (client/dataplane.c).
    sig.update({
        "tsr_client_shm_create": (c_int, [c_size_t, POINTER(P), E]),
        "tsr_client_shm_free": (None, [P]),
        "tsr_client_shm_data": (c_void_p, [P]),
        "tsr_client_shm_size": (c_size_t, [P]),
        "tsr_client_shm_name": (c_char_p, [P]),
        "tsr_client_buffer_write_shm": (c_int, [P, c_uint64, c_uint64, P, c_uint64, c_size_t,
                                                c_int, E]),
        "tsr_client_buffer_read_shm": (c_int, [P, c_uint64, c_uint64, P, c_uint64, c_size_t,
                                               c_int, E]),
        "tsr_client_run_shm": (c_int, [P, P, POINTER(CompileOpts), P, POINTER(c_uint64),
                                       c_uint64, POINTER(Decision), c_int, E]),
        "tsr_client_batch": (c_int, [P, POINTER(LaunchDesc), c_size_t, c_bool,
                                     POINTER(BatchResult), c_int, E]),
        "tsr_client_buffer_import": (c_int, [P, c_char_p, c_uint64, c_uint64, c_int, c_int,
                                             POINTER(c_int64), POINTER(c_uint64), c_int, E]),
        "tsr_client_ring_open": (c_int, [P, POINTER(LaunchDesc), c_size_t, c_uint, POINTER(P),
                                         c_int, E]),
        "tsr_client_ring_launch": (c_int, [P, c_uint32, POINTER(c_double), c_int, E]),
        "tsr_client_ring_run": (c_int, [P, POINTER(c_uint32), c_size_t, POINTER(c_double), c_int,
                                        E]),
        "tsr_client_ring_close": (c_int, [P, POINTER(c_uint64), c_int, E]),
    })
    for name, (res, args) in sig.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ImportError("tessera: %s has no %s: it is older than this package; rebuild "
                              "it with `make` at the top of the repository"
                              % (lib._name, name)) from None
        fn.restype = res
        fn.argtypes = args
    return lib


lib = _declare(_load())
