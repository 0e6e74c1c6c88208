"""Shared memory, batches and CUDA IPC from Python against a CPU tesserad."""
import numpy as np
import pytest

import tessera

AFFINE = {"kind": "pointwise", "dtype": "f32",
          "inputs": [{"name": "x", "shape": [65536]}],
          "ops": [{"op": "const", "value": 2, "out": "two"},
                  {"op": "mul", "args": ["x", "two"], "out": "y"}],
          "output": "y"}
SMALL = dict(AFFINE, inputs=[{"name": "x", "shape": [4]}])
ONE_TO_FOUR = np.array([1, 2, 3, 4], np.float32)


def small_pair(client):
    """The 4-element y = 2x kernel and two buffers for it, the first holding 1..4."""
    k = client.compile(SMALL)
    a, b = client.buffer("f32", (4,)), client.buffer("f32", (4,))
    a.write(ONE_TO_FOUR)
    return k, a, b


@pytest.fixture
def shm_client(daemon):
    # Threshold 1 byte: every tensor goes through shared memory.
    with tessera.connect(daemon.url, force="", shm_threshold=1) as c:
        yield c


def test_run_through_shared_memory_matches_numpy(shm_client):
    x = np.random.default_rng(3).standard_normal(65536, dtype=np.float32)
    np.testing.assert_array_equal(shm_client.run(AFFINE, [x]), x * 2)
    assert shm_client._shm is not None and shm_client._shm.size >= 2 * x.nbytes


def test_buffer_write_read_through_shared_memory(shm_client):
    x = np.arange(1 << 18, dtype=np.float32)
    with shm_client.buffer("f32", x.shape) as b:
        b.write(x)
        np.testing.assert_array_equal(b.read(), x)


def test_threshold_zero_keeps_data_inline(daemon):
    with tessera.connect(daemon.url, shm_threshold=0) as c:
        y = c.run(AFFINE, [np.ones(65536, np.float32)])
        assert c._shm is None
        assert y[0] == 2.0


def test_shared_memory_array_bounds():
    shm = tessera.SharedMemory(4096)
    assert shm.name.startswith("/tsr-")
    a = shm.array(np.float32, (1024,))
    a[:] = 7
    assert shm.array(np.float32, (1,), 4092)[0] == 7
    with pytest.raises(tessera.TesseraError) as e:
        shm.array(np.float32, (2,), 4092)
    assert e.value.code == tessera.Status.BUFFER_MISMATCH
    shm.free()


def test_batch_ping_pong(client):
    k, a, b = small_pair(client)
    bufs = [a, b]
    res = client.batch([(k, [bufs[i % 2]], bufs[(i + 1) % 2]) for i in range(10)], graph=True)
    assert res["launched"] == 10 and res["graph_replayed"] is False
    np.testing.assert_array_equal(a.read(), ONE_TO_FOUR * 1024)


def test_batch_error_names_the_entry(client):
    k = client.compile(SMALL)
    a, wrong = client.buffer("f32", (4,)), client.buffer("f32", (5,))
    with pytest.raises(tessera.TesseraError) as e:
        client.batch([(k, [a], a), (k, [wrong], a)])
    assert e.value.code == tessera.Status.BUFFER_MISMATCH
    assert "batch.launches[1]" in e.value.message


def test_import_cuda_is_unsupported_on_cpu(client):
    with pytest.raises(tessera.TesseraError) as e:
        client.import_cuda(b"\0" * 64, 1024, "f32", (16,))
    assert e.value.code == tessera.Status.UNSUPPORTED
    with pytest.raises(tessera.TesseraError) as e:
        client.import_cuda(b"\0" * 10, 1024, "f32", (16,))
    assert e.value.code == tessera.Status.INVALID_ARGUMENT


def test_compiled_is_remembered_per_region(client):
    k1 = client.compiled(AFFINE)
    k2 = client.compiled(tessera.Region(AFFINE))
    assert k1 is k2
    assert client.compiled(AFFINE, policy="measure") is not k1


def test_imported_failure_is_not_remembered(client):
    for _ in range(2):
        with pytest.raises(tessera.TesseraError) as e:
            client.imported(b"\1" * 64, 1024, "f32", (16,))
        assert e.value.code == tessera.Status.UNSUPPORTED
    assert len(client._imports) == 0


def test_ring_ping_pong_and_errors(client):
    k, a, b = small_pair(client)
    with client.ring([(k, [a], b), (k, [b], a)]) as ring:
        for i in range(10):
            assert ring.launch(i % 2) >= 0.0
        with pytest.raises(tessera.TesseraError) as e:
            ring.launch(5)
        assert e.value.code == tessera.Status.INVALID_ARGUMENT
        assert str(e.value).endswith("ring slot: binding 5, the ring has 2 (0 .. 1)")
        assert ring.launches == 10
    assert ring.close() == 11  # the failed slot was served too
    np.testing.assert_array_equal(a.read(), ONE_TO_FOUR * 1024)


def test_ring_run_keeps_the_order_and_runs_past_a_failure(client):
    k, a, b = small_pair(client)
    # Four slots for ten launches: the run waits for room as it goes.
    with client.ring([(k, [a], b), (k, [b], a)], slots=4) as ring:
        assert ring.run([0, 1] * 5) >= 0.0
        np.testing.assert_array_equal(a.read(), ONE_TO_FOUR * 1024)
        with pytest.raises(tessera.TesseraError) as e:
            ring.run([0, 5, 1])
        assert e.value.code == tessera.Status.INVALID_ARGUMENT
        assert str(e.value).endswith("ring_run[1]: ring slot: binding 5, the ring has 2 (0 .. 1)")
        # The launches on either side of the bad one ran.
        np.testing.assert_array_equal(a.read(), ONE_TO_FOUR * 4096)
        assert ring.run([]) == 0.0
    assert ring.close() == 13


def test_ring_binding_checked_like_a_launch(client):
    k = client.compile(SMALL)
    a, wrong = client.buffer("f32", (4,)), client.buffer("f32", (8,))
    with pytest.raises(tessera.TesseraError) as e:
        client.ring([(k, [wrong], a)])
    assert e.value.code == tessera.Status.BUFFER_MISMATCH
    assert "ring_open.bindings[0].inputs[0] (x): buffer holds 32 bytes of f32" in str(e.value)
