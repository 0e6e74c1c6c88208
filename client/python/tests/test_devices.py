"""Devices through the Python client: a daemon whose CPU backend shows three
devices; devices() with their load, buffers on a chosen or placed device, and
a launch mixing devices refused CONFLICT."""
import numpy as np
import pytest

import tessera
from conftest import serve

AFFINE = {"kind": "pointwise", "dtype": "f32",
          "inputs": [{"name": "x", "shape": [4]}],
          "ops": [{"op": "const", "value": 2, "out": "two"},
                  {"op": "mul", "args": ["x", "two"], "out": "t"},
                  {"op": "const", "value": 1, "out": "one"},
                  {"op": "add", "args": ["t", "one"], "out": "y"}],
          "output": "y"}


@pytest.fixture(scope="module")
def daemon():
    yield from serve(extra=("--cpu-devices", "3"))


def test_devices_with_their_load(client):
    devs = client.devices()
    assert [d["index"] for d in devs] == [0, 1, 2]
    assert all(d["arch"] == "cpu" and d["buffers"] == 0 for d in devs)
    with client.buffer("f32", (16,), device=2) as b:
        assert b.device == 2
        assert client.devices()[2]["memory_used_bytes"] == 64
        assert client.devices()[2]["buffers"] == 1
    assert client.devices()[2]["buffers"] == 0


def test_placed_buffers_spread(client):
    bufs = [client.buffer("f32", (16,)) for _ in range(3)]
    assert sorted(b.device for b in bufs) == [0, 1, 2]
    for b in bufs:
        b.free()


def test_unknown_device(client):
    with pytest.raises(tessera.TesseraError) as e:
        client.buffer("f32", (4,), device=3)
    assert e.value.code == tessera.Status.NOT_FOUND


def test_launch_on_a_device_and_mixed_devices(client):
    k = client.compile(AFFINE)
    with client.buffer("f32", (4,), device=1) as x, client.buffer("f32", (4,), device=1) as y, \
            client.buffer("f32", (4,), device=2) as far:
        x.write(np.array([1, 2, 3, 4], dtype=np.float32))
        client.launch(k, [x], y)
        np.testing.assert_array_equal(y.read(), [3, 5, 7, 9])
        with pytest.raises(tessera.TesseraError) as e:
            client.launch(k, [x], far)
        assert e.value.code == tessera.Status.CONFLICT
        assert "device 1" in str(e.value) and "device 2" in str(e.value)


def test_run_on_a_device(client):
    x = np.array([1, 2, 3, 4], dtype=np.float32)
    np.testing.assert_array_equal(client.run(AFFINE, [x], device=2), [3, 5, 7, 9])
    np.testing.assert_array_equal(client.run(AFFINE, [x]), [3, 5, 7, 9])
    with pytest.raises(tessera.TesseraError) as e:
        client.run(AFFINE, [x], device=5)
    assert e.value.code == tessera.Status.NOT_FOUND


def test_health_lists_every_device(client):
    h = client.health()
    assert h["state"] == "ready"
    assert h["recoveries"] == 0
    assert h["sessions"] >= 1
    assert h["devices"] == [{"index": i, "state": "serving", "recoveries": 0, "faults": 0}
                            for i in range(3)]
