"""Shared memory falls back to inline data, with one warning per client, when
the daemon cannot open the client's segment: a daemon in another mount
namespace (its own /dev/shm, as from a second container), and the same failure
injected into the library calls."""
import shutil
import subprocess
import threading
import warnings

import numpy as np
import pytest

import tessera
from conftest import serve

X = {"kind": "pointwise", "dtype": "f32",
     "inputs": [{"name": "x", "shape": [1024]}],
     "ops": [{"op": "const", "value": 3, "out": "three"},
             {"op": "mul", "args": ["x", "three"], "out": "y"}],
     "output": "y"}


def _private_shm_works():
    if shutil.which("unshare") is None:
        return False
    p = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm"],
                       capture_output=True)
    return p.returncode == 0


@pytest.fixture(scope="module")
def other_namespace():
    """tesserad in its own mount namespace with an empty /dev/shm of its own."""
    if not _private_shm_works():
        pytest.skip("needs root and unshare -m to give a daemon its own /dev/shm "
                    "(the injected failure below covers the fallback without it)")
    yield from serve(wrap=["unshare", "-m", "sh", "-c",
                           'mount -t tmpfs tmpfs /dev/shm && exec "$0" "$@"'])


def _recorded(fn):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = fn()
    return result, [w for w in seen if issubclass(w.category, tessera.SharedMemoryFallbackWarning)]


def test_another_mount_namespace_falls_back_once(other_namespace):
    x = np.arange(1024, dtype=np.float32)
    with tessera.connect(other_namespace.url, shm_threshold=1) as c:
        y, seen = _recorded(lambda: c.run(X, [x]))
        np.testing.assert_array_equal(y, x * 3)
        assert len(seen) == 1
        text = str(seen[0].message)
        assert other_namespace.url in text and "inline" in text
        assert "NOT_FOUND: run.inputs[0].shm.name: shm_open /tsr-" in text
        assert seen[0].filename == __file__  # points at the caller's line
        assert c.shm_threshold == 0 and c._shm is None
        assert c.shm_fallback.code == tessera.Status.NOT_FOUND
        # Later calls go inline at once, silently; buffers too.
        y, seen = _recorded(lambda: c.run(X, [x + 1]))
        np.testing.assert_array_equal(y, (x + 1) * 3)
        with c.buffer("f32", (1024,)) as b:
            _, more = _recorded(lambda: (b.write(x), b.read()))
        assert seen == [] and more == []


def test_buffers_fall_back_too(other_namespace):
    x = np.linspace(-1, 1, 1 << 18, dtype=np.float32)  # 1 MiB
    with tessera.connect(other_namespace.url, shm_threshold=1) as c:
        with c.buffer("f32", x.shape) as b:
            _, seen = _recorded(lambda: b.write(x))
            assert len(seen) == 1 and "buffer_write.shm.name: shm_open" in str(seen[0].message)
            np.testing.assert_array_equal(b.read(), x)
    with tessera.connect(other_namespace.url, shm_threshold=1 << 20) as c:
        with c.buffer("f32", x.shape) as b:
            half = x.size // 2
            b.write(x[:half])  # two halves, each below this client's threshold: inline
            b.write(x[half:], offset=x.nbytes // 2)
            y, seen = _recorded(b.read)
            assert len(seen) == 1 and "buffer_read.shm.name: shm_open" in str(seen[0].message)
            np.testing.assert_array_equal(y, x)


def test_each_client_warns_once(other_namespace):
    x = np.ones(1024, np.float32)
    for _ in range(2):
        with tessera.connect(other_namespace.url, shm_threshold=1) as c:
            _, seen = _recorded(lambda: [c.run(X, [x]) for _ in range(3)])
            assert len(seen) == 1


# ---- the same failure injected, with a daemon that shares /dev/shm ----

class _FailingShm:
    """The C library, but its shared-memory calls answer as a daemon that
    cannot find the segment does, counting how often they are called."""

    def __init__(self, real, code=tessera.Status.NOT_FOUND, message=None):
        self._real = real
        self.calls = 0
        self.code = code
        self.message = message

    def __getattr__(self, name):
        real = getattr(self._real, name)
        if not name.endswith("_shm") or name == "tsr_client_shm_free":
            return real
        field = {"tsr_client_run_shm": "run.inputs[0].shm",
                 "tsr_client_buffer_write_shm": "buffer_write.shm",
                 "tsr_client_buffer_read_shm": "buffer_read.shm"}[name]

        def failing(*args):
            self.calls += 1
            err = args[-1]._obj
            err.code = int(self.code)
            err.message = (self.message or "%s.name: shm_open /tsr-1-2: No such file or "
                           "directory" % field).encode()
            return err.code
        return failing


@pytest.fixture
def failing_shm(monkeypatch):
    fake = _FailingShm(tessera.lib)
    monkeypatch.setattr(tessera, "lib", fake)
    return fake


def test_injected_not_found_falls_back_once(daemon, failing_shm):
    x = np.arange(1024, dtype=np.float32)
    with tessera.connect(daemon.url, shm_threshold=1) as c:
        y, seen = _recorded(lambda: [c.run(X, [x]) for _ in range(3)])
        for got in y:
            np.testing.assert_array_equal(got, x * 3)
        assert len(seen) == 1 and failing_shm.calls == 1
        assert c.shm_threshold == 0 and c.shm_fallback.code == tessera.Status.NOT_FOUND
        with c.buffer("f32", (1024,)) as b:
            b.write(x)
            np.testing.assert_array_equal(b.read(), x)
        assert failing_shm.calls == 1


def test_injected_failure_from_threads_warns_once(daemon, failing_shm):
    x = np.arange(1024, dtype=np.float32)
    results = []
    with tessera.connect(daemon.url, shm_threshold=1) as c:
        def work():
            results.append(c.run(X, [x]))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            threads = [threading.Thread(target=work) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert len(results) == 8 and all(np.array_equal(y, x * 3) for y in results)
    assert len([w for w in seen if w.category is tessera.SharedMemoryFallbackWarning]) == 1
    assert failing_shm.calls == 1


def test_other_shared_memory_errors_are_raised(daemon, failing_shm):
    failing_shm.code = tessera.Status.UNAUTHENTICATED
    failing_shm.message = "run.inputs[0].shm.name: /tsr-1-2 belongs to uid 5, not the caller's 0"
    with tessera.connect(daemon.url, shm_threshold=1) as c:
        with pytest.raises(tessera.TesseraError) as e:
            c.run(X, [np.ones(1024, np.float32)])
        assert e.value.code == tessera.Status.UNAUTHENTICATED
        assert c.shm_threshold == 1 and c.shm_fallback is None


def test_a_missing_buffer_is_not_a_missing_segment(daemon):
    with tessera.connect(daemon.url, shm_threshold=1) as c:
        b = c.buffer("f32", (1024,))
        b.write(np.ones(1024, np.float32))
        h = b.handle
        b.free()
        b.handle = h
        with pytest.raises(tessera.TesseraError) as e:
            b.read()
        assert e.value.code == tessera.Status.NOT_FOUND and "shm_open" not in e.value.message
        assert c.shm_threshold == 1 and c.shm_fallback is None
        b.handle = 0
