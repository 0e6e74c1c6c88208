"""Client.run checks its inputs as tessera-cli checks its .npy files: names (a
dict by name, a list in signature order), element types (float32, float16,
float64 only) and exact shapes, with the CLI's status codes and messages."""
import os
import subprocess

import numpy as np
import pytest

import tessera
from conftest import BUILD, ROOT

MATMUL_JSON = os.path.join(ROOT, "examples", "matmul.json")
MATMUL = tessera.Region.from_json(MATMUL_JSON)  # bf16, a (128, 64), b (64, 96)
ADD = {"kind": "pointwise", "dtype": "f32",
       "inputs": [{"name": "a", "shape": [4, 3]}, {"name": "b", "shape": [3]}],
       "ops": [{"op": "add", "args": ["a", "b"], "out": "y"}],
       "output": "y"}


def _raises(client, region, inputs, code, message):
    with pytest.raises(tessera.TesseraError) as e:
        client.run(region, inputs)
    assert (e.value.code, e.value.message) == (code, message)
    assert str(e.value) == "%s: %s" % (code.name, message)
    return e.value


@pytest.fixture
def ab():
    rng = np.random.default_rng(5)
    return (rng.standard_normal((128, 64), dtype=np.float32),
            rng.standard_normal((64, 96), dtype=np.float32))


def test_transposed_matrix_is_a_shape_mismatch(client, ab):
    a, b = ab
    _raises(client, MATMUL, [a.T.copy(), b], tessera.Status.BUFFER_MISMATCH,
            "a: shape (64,128), expected (128,64)")


def test_same_count_other_rank_is_a_shape_mismatch(client, ab):
    a, b = ab
    _raises(client, MATMUL, [a, b.reshape(-1)], tessera.Status.BUFFER_MISMATCH,
            "b: shape (6144), expected (64,96)")
    _raises(client, ADD, [np.zeros((4, 3), np.float32), np.zeros((1, 3), np.float32)],
            tessera.Status.BUFFER_MISMATCH, "b: shape (1,3), expected (3)")


def test_int64_is_refused_not_cast(client, ab):
    a, b = ab
    _raises(client, MATMUL, [a.astype(np.int64), b], tessera.Status.BAD_ATTRIBUTE,
            "a: element type '<i8' unsupported (need <f4, <f2, <f8)")
    # Python ints make an int64 array too: written as floats they are taken.
    _raises(client, ADD, [[[1, 2, 3]] * 4, [1.0, 2.0, 3.0]], tessera.Status.BAD_ATTRIBUTE,
            "a: element type '<i8' unsupported (need <f4, <f2, <f8)")


@pytest.mark.parametrize("dtype,descr", [(np.int32, "<i4"), (np.uint16, "<u2"),
                                         (np.bool_, "|b1"), (np.complex64, "<c8"),
                                         (np.longdouble, np.dtype(np.longdouble).str)])
def test_other_element_types_are_refused(client, dtype, descr):
    _raises(client, ADD, [np.zeros((4, 3), dtype), np.zeros(3, np.float32)],
            tessera.Status.BAD_ATTRIBUTE,
            "a: element type '%s' unsupported (need <f4, <f2, <f8)" % descr)


def test_the_element_type_is_checked_before_the_shape(client):
    _raises(client, ADD, [np.zeros((3, 4), np.int64), np.zeros(3, np.float32)],
            tessera.Status.BAD_ATTRIBUTE, "a: element type '<i8' unsupported (need <f4, <f2, <f8)")


def test_float16_and_float64_are_taken(client):
    a = np.arange(12, dtype=np.float64).reshape(4, 3) / 8
    b = np.array([0.5, 1.5, -2.0], np.float16)
    y = client.run(ADD, [a, b])
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, (a + b.astype(np.float64)).astype(np.float32))
    big_endian = np.zeros((4, 3), ">f4")  # byte order is numpy's business
    np.testing.assert_array_equal(client.run(ADD, [big_endian, b]), np.broadcast_to(b, (4, 3)))


def test_a_dict_is_taken_by_name_in_any_order(client, ab):
    a, b = ab
    by_list = client.run(MATMUL, [a, b])
    by_name = client.run(MATMUL, {"b": b, "a": a})
    np.testing.assert_array_equal(by_list, by_name)


def test_dict_names_are_checked_like_the_clis(client, ab):
    a, b = ab
    _raises(client, MATMUL, {"a": a, "x": b}, tessera.Status.INVALID_ARGUMENT,
            "unknown input 'x' (the region reads: a, b)")
    _raises(client, MATMUL, {"a": a}, tessera.Status.INVALID_ARGUMENT,
            "missing input 'b' (the region reads: a, b)")
    _raises(client, MATMUL, {"a": a, "b": b, 0: b}, tessera.Status.INVALID_ARGUMENT,
            "input names are strings, got 0")


def test_inputs_must_be_a_list_or_a_dict(client, ab):
    a, _ = ab
    _raises(client, MATMUL, a, tessera.Status.INVALID_ARGUMENT,
            "inputs are a list in signature order (a, b) or a dict by name, not ndarray")
    _raises(client, MATMUL, [a], tessera.Status.INVALID_ARGUMENT,
            "region takes 2 inputs (a, b), got 1")
    _raises(client, MATMUL, (a, a, a), tessera.Status.INVALID_ARGUMENT,
            "region takes 2 inputs (a, b), got 3")


def test_ragged_lists_are_not_arrays(client):
    with pytest.raises(tessera.TesseraError) as e:
        client.run(ADD, [[[1.0, 2.0], [3.0]], [1.0, 2.0, 3.0]])
    assert e.value.code == tessera.Status.INVALID_ARGUMENT
    assert e.value.message.startswith("a: not an array: ")


def test_buffer_write_refuses_integers(client):
    with client.buffer("f32", (3,)) as buf:
        with pytest.raises(tessera.TesseraError) as e:
            buf.write(np.arange(3))
        assert e.value.code == tessera.Status.BAD_ATTRIBUTE
        assert e.value.message == ("buffer_write: element type '%s' unsupported (need <f4, <f2, "
                                   "<f8)" % np.arange(3).dtype.str)


# ---- the same inputs through tessera-cli ----

def _cli(daemon, tmp_path, arrays, names=("a", "b")):
    """tessera-cli run examples/matmul.json on arrays saved as .npy: (rc, the
    error line or the output)."""
    args = [os.path.join(BUILD, "bin", "tessera-cli"), "--url", daemon.url, "run", MATMUL_JSON]
    for name, x in zip(names, arrays):
        path = tmp_path / ("%s.npy" % name)
        np.save(path, x)
        args += ["-i", "%s=%s" % (name, path)]
    out = tmp_path / "out.npy"
    p = subprocess.run(args + ["-o", str(out)], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        return p.returncode, p.stderr.splitlines()[0]
    return 0, np.load(out)


def test_the_cli_gives_the_same_codes_and_messages(daemon, client, ab, tmp_path):
    a, b = ab
    rc, line = _cli(daemon, tmp_path, [a.T.copy(), b])
    e = _raises(client, MATMUL, [a.T.copy(), b], tessera.Status.BUFFER_MISMATCH,
                "a: shape (64,128), expected (128,64)")
    assert rc == 5 and line.startswith("tessera-cli: BUFFER_MISMATCH: ")
    assert line.endswith(": " + e.message)

    rc, line = _cli(daemon, tmp_path, [a.astype(np.int64), b])
    e = _raises(client, MATMUL, [a.astype(np.int64), b], tessera.Status.BAD_ATTRIBUTE,
                "a: element type '<i8' unsupported (need <f4, <f2, <f8)")
    assert rc == 5 and line.startswith("tessera-cli: BAD_ATTRIBUTE: ")
    assert line.endswith(e.message[len("a: "):])

    rc, line = _cli(daemon, tmp_path, [a, b], names=("a", "x"))
    e = _raises(client, MATMUL, {"a": a, "x": b}, tessera.Status.INVALID_ARGUMENT,
                "unknown input 'x' (the region reads: a, b)")
    assert (rc, line) == (2, "tessera-cli: INVALID_ARGUMENT: " + e.message)

    rc, line = _cli(daemon, tmp_path, [a], names=("a",))
    assert rc == 2 and line.startswith("tessera-cli: INVALID_ARGUMENT: missing input 'b'")


def test_float64_rounds_to_bf16_once_as_the_cli_does(daemon, client, tmp_path):
    # 1 + 2^-8 + 2^-30 is just above the tie between 1 and 1 + 2^-7: rounded once
    # it goes up; through float32 first (1 + 2^-8 exactly) it would tie to 1.
    r = tessera.Region({"kind": "matmul", "dtype": "bf16", "out_dtype": "f32",
                        "m": 128, "n": 96, "k": 64})
    a = np.zeros((128, 64))
    a[0, 0] = 1 + 2.0 ** -8 + 2.0 ** -30
    a[1, 0] = -(1 + 2.0 ** -8 + 2.0 ** -30)
    a[2, 0] = 1 + 2.0 ** -8          # an exact tie: to even, 1
    a[3, 0] = 3.4e38                 # past the largest bf16 (and 1e39 past float32s): inf
    a[7, 0] = 1e39
    a[4, 0] = 1e-300                 # to zero
    a[5, 0] = np.nan
    a[6, 0] = 1 + 3 * 2.0 ** -8      # a tie to even upwards: 1 + 2^-6
    a[8:, :] = np.random.default_rng(2).standard_normal((120, 64))
    b = np.zeros((64, 96))
    b[0, 0] = 1.0
    y = client.run(r, [a, b])
    assert y[0, 0] == 1 + 2.0 ** -7 and y[1, 0] == -(1 + 2.0 ** -7)
    assert y[2, 0] == 1.0 and np.isinf(y[3, 0]) and y[4, 0] == 0.0 and np.isnan(y[5, 0])
    assert y[6, 0] == 1 + 2.0 ** -6 and np.isinf(y[7, 0])
    with open(tmp_path / "r.json", "w") as f:
        f.write(r.json)
    args = [os.path.join(BUILD, "bin", "tessera-cli"), "--url", daemon.url, "run",
            str(tmp_path / "r.json"), "-i", "a=%s" % (tmp_path / "a.npy"),
            "-i", "b=%s" % (tmp_path / "b.npy"), "-o", str(tmp_path / "y.npy")]
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    subprocess.run(args, check=True, capture_output=True, timeout=60)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), y)


def test_f64_to_bf16_bits_matches_the_float32_path_where_it_is_exact():
    x = np.random.default_rng(9).standard_normal(10000).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e-45, 1e-40],
                       np.float32)
    for v in (x, special):
        np.testing.assert_array_equal(tessera.f64_to_bf16_bits(v.astype(np.float64)),
                                      tessera.f32_to_bf16_bits(v))


def test_torch_tensors_get_the_same_checks(client, ab):
    torch = pytest.importorskip("torch")
    a, b = ab
    with pytest.raises(tessera.TesseraError) as e:
        client.run(MATMUL, [torch.from_numpy(a.T.copy()), torch.from_numpy(b)])
    assert (e.value.code, e.value.message) == (tessera.Status.BUFFER_MISMATCH,
                                               "a: shape (64,128), expected (128,64)")
    with pytest.raises(tessera.TesseraError) as e:
        client.run(MATMUL, {"a": torch.zeros((128, 64), dtype=torch.int64),
                            "b": torch.from_numpy(b)})
    assert (e.value.code, e.value.message) == (
        tessera.Status.BAD_ATTRIBUTE,
        "a: element type 'int64' unsupported (need float32, float16, bfloat16, float64)")
    y = client.run(MATMUL, {"b": torch.from_numpy(b), "a": torch.from_numpy(a)})
    np.testing.assert_array_equal(y.float().numpy(), client.run(MATMUL, [a, b]))
