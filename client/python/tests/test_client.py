"""The Python client against a real tesserad on the CPU backend: regions,
run, compile + buffers + launch, verify, candidates, stats and errors."""
import contextlib
import json
import os
import time

import numpy as np
import pytest

import tessera
from conftest import ROOT

ADD = {"kind": "pointwise", "dtype": "f32",
       "inputs": [{"name": "a", "shape": [4, 3]}, {"name": "b", "shape": [3]}],
       "ops": [{"op": "add", "args": ["a", "b"], "out": "t"},
               {"op": "relu", "args": ["t"], "out": "y"}],
       "output": "y"}
ADD_A = np.arange(12, dtype=np.float32).reshape(4, 3) - 6
ADD_B = np.array([1, 2, 3], dtype=np.float32)
ADD_Y = np.maximum(ADD_A + ADD_B, 0)


@contextlib.contextmanager
def add_buffers(client):
    """Buffers for ADD's a, b and y, with ADD_A and ADD_B written; freed after."""
    with client.buffer("f32", (4, 3)) as ba, client.buffer("f32", (3,)) as bb, \
            client.buffer("f32", (4, 3)) as by:
        ba.write(ADD_A)
        bb.write(ADD_B)
        yield ba, bb, by


def test_region_from_dict_has_signature():
    r = tessera.Region(ADD)
    assert [(t.name, t.dtype, t.shape) for t in r.inputs] == [("a", "f32", (4, 3)),
                                                              ("b", "f32", (3,))]
    assert (r.output.dtype, r.output.shape, r.output.nbytes) == ("f32", (4, 3), 48)


def test_region_from_json_file():
    r = tessera.Region.from_json(os.path.join(ROOT, "examples", "matmul.json"))
    assert r.kind == "matmul"
    assert len(r.inputs) == 2


def test_invalid_region_raises_with_code():
    bad = dict(ADD, ops=[{"op": "nope", "args": ["a"], "out": "y"}])
    with pytest.raises(tessera.TesseraError) as e:
        tessera.Region(bad)
    assert e.value.code == tessera.Status.UNKNOWN_OP
    with pytest.raises(tessera.TesseraError) as e:
        tessera.Region("{not json")
    assert e.value.code == tessera.Status.BAD_JSON


def test_hello_names_the_cpu_backend(client):
    info = client.hello()
    assert info["backend"] == "cpu"
    assert info["protocol_version"] == 1


def test_run_pointwise_matches_numpy(client):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 3), dtype=np.float32)
    b = rng.standard_normal(3, dtype=np.float32)
    y, d = client.run(tessera.Region(ADD), [a, b], with_decision=True)
    assert y.dtype == np.float32 and y.shape == (4, 3)
    np.testing.assert_array_equal(y, np.maximum(a + b, 0))
    assert d.candidate != ""


def test_run_accepts_a_region_dict_and_float_lists(client):
    y = client.run(ADD, [[[1.0, -2.0, 3.0]] * 4, [1.0, 1.0, -10.0]])
    np.testing.assert_array_equal(y, np.array([[2, 0, 0]] * 4, dtype=np.float32))


def test_run_matmul_bf16_rounds_inputs(client):
    r = tessera.Region({"kind": "matmul", "dtype": "bf16", "out_dtype": "f32",
                        "m": 2, "n": 2, "k": 2})
    a = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    b = np.array([[1.0, 0.0], [0.0, 1.00390625]], dtype=np.float32)  # 1 + 2^-8 rounds to 1
    y = client.run(r, [a, b])
    np.testing.assert_array_equal(y, a)


def test_run_wrong_input_count_raises(client):
    with pytest.raises(tessera.TesseraError) as e:
        client.run(ADD, [np.zeros((4, 3), np.float32)])
    assert e.value.code == tessera.Status.INVALID_ARGUMENT
    assert e.value.message == "region takes 2 inputs (a, b), got 1"


def test_compile_buffers_launch(client):
    r = tessera.Region(ADD)
    k = client.compile(r)
    assert k.kernel != 0 and len(k.fingerprint) == 64
    with add_buffers(client) as (ba, bb, by):
        assert ba.nbytes == 48
        client.launch(k, [ba, bb], by)
        np.testing.assert_array_equal(by.read(), ADD_Y)


def launch_refused(client, b_shape, free_b=False):
    """ADD's launch on f32 buffers a (4, 3), b of b_shape (freed first when
    free_b) and y (4, 3), which must raise: its error and b."""
    k = client.compile(ADD)
    ba = client.buffer("f32", (4, 3))
    bb = client.buffer("f32", b_shape)
    by = client.buffer("f32", (4, 3))
    if free_b:
        bb.free()
    with pytest.raises(tessera.TesseraError) as e:
        client.launch(k, [ba, bb], by)
    return e.value, bb


def test_launch_on_freed_buffer_is_not_found(client):
    err, bb = launch_refused(client, (3,), free_b=True)
    assert err.code == tessera.Status.NOT_FOUND
    with pytest.raises(tessera.TesseraError) as e:
        bb.handle = 12345
        bb.free()
    assert e.value.code == tessera.Status.NOT_FOUND


def test_kernel_free_then_launch_is_not_found_and_recompile_works(client):
    k = client.compiled(ADD)
    with add_buffers(client) as (ba, bb, by):
        client.kernel_free(k)
        with pytest.raises(tessera.TesseraError) as e:
            client.launch(k, [ba, bb], by)
        assert e.value.code == tessera.Status.NOT_FOUND
        with pytest.raises(tessera.TesseraError) as e:
            client.kernel_free(k.kernel)
        assert e.value.code == tessera.Status.NOT_FOUND
        assert "kernel_free.kernel" in str(e.value)
        k2 = client.compiled(ADD)
        assert k2.kernel not in (0, k.kernel)
        assert k2.key == k.key
        client.launch(k2, [ba, bb], by)
        np.testing.assert_array_equal(by.read(), ADD_Y)


def test_launch_with_wrong_sized_buffer_is_mismatch(client):
    err, _ = launch_refused(client, (4,))
    assert err.code == tessera.Status.BUFFER_MISMATCH


def test_buffer_write_past_end_is_mismatch(client):
    with client.buffer("f32", (2,)) as buf:
        with pytest.raises(tessera.TesseraError) as e:
            buf.write(np.zeros(3, np.float32))
        assert e.value.code == tessera.Status.BUFFER_MISMATCH


def test_buffer_bad_shape_and_dtype(client):
    with pytest.raises(tessera.TesseraError) as e:
        client.buffer("f32", (0, 2))
    assert e.value.code == tessera.Status.BAD_DIMENSION
    with pytest.raises(tessera.TesseraError) as e:
        client.buffer("f64", (2,))
    assert e.value.code == tessera.Status.BAD_DTYPE


def test_buffer_f16_round_trip(client):
    x = np.array([0.5, -2.0, 65504.0], dtype=np.float16)
    with client.buffer("f16", (3,)) as buf:
        buf.write(x)
        got = buf.read()
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, x)


def test_verify_passes_for_the_reference(client):
    v = client.verify(ADD)
    assert v["verdict"].state == "pass"
    assert v["verdict"].rel_error <= v["verdict"].bound


def test_candidates_lists_one_selected(client):
    rows = client.candidates(ADD)
    assert len(rows) >= 1
    assert sum(1 for r in rows if r["selected"]) == 1


def test_forced_unknown_candidate_is_arbiter_error(client):
    with pytest.raises(tessera.TesseraError) as e:
        client.compile(ADD, force="no_such_candidate")
    assert e.value.code == tessera.Status.ARBITER
    assert "no_such_candidate" in e.value.message


def test_stats_count_requests(client):
    client.hello()
    s = client.stats()
    assert isinstance(s, dict) and len(s) > 0


def test_cache_list_says_where_each_entry_came_from(client):
    k = client.compile(ADD)
    rows = [r for r in client.cache_list() if r["key"] == k.key]
    assert len(rows) == 1
    assert rows[0]["origin"] == "compiled"
    assert (rows[0]["candidate"], rows[0]["kind"]) == (k.decision.candidate, "pointwise")


def test_connect_to_nothing_is_unavailable(tmp_path):
    with pytest.raises(tessera.TesseraError) as e:
        tessera.connect("ipc://" + str(tmp_path / "none"))
    assert e.value.code == tessera.Status.UNAVAILABLE


def test_json_text_and_dict_regions_agree(client):
    a = client.compile(tessera.Region(json.dumps(ADD)))
    b = client.compile(ADD)
    assert a.fingerprint == b.fingerprint


def test_spin_is_checked_and_spinning_calls_answer(daemon):
    with pytest.raises(tessera.TesseraError) as e:
        tessera.Client(daemon.url, spin_us=-1)
    assert e.value.code == tessera.Status.INVALID_ARGUMENT
    assert e.value.message == "spin: -1 microseconds, want 0 to 1000000"
    with pytest.raises(TypeError):
        tessera.Client(daemon.url, spin_us=0.5)
    with tessera.Client(daemon.url, spin_us=1_000_000) as c:
        # The spin ends with the reply: ten calls that ran out a 1 s spin
        # would take 10 s.
        t0 = time.monotonic()
        for _ in range(10):
            assert c.hello()["backend"] == "cpu"
        assert time.monotonic() - t0 < 5.0, "the spin outlasted its replies"
        c.set_spin(0)
        assert c.hello()["backend"] == "cpu"
        with pytest.raises(tessera.TesseraError) as e:
            c.set_spin(1_000_001)
        assert e.value.code == tessera.Status.INVALID_ARGUMENT
