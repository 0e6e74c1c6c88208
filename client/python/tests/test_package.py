"""The package as a user installs it: `pip install client/python` into a fresh
venv (numpy from PyPI), the version from one place, where the library is found
and what import says when it is not, and the documentation of the public API."""
import ctypes.util
import inspect
import os
import re
import shutil
import subprocess
import sys

import pytest

import tessera
from conftest import ROOT

PACKAGE = os.path.join(ROOT, "client", "python")
LIB = tessera.lib._name


def _env(**extra):
    """The environment less anything that would find the library or the source
    tree for the child, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TESSERA_CLIENT_LIB", "LD_LIBRARY_PATH", "PYTHONPATH", "BUILD")}
    env.update(extra)
    return env


def _python(py, code, tmp_path, **env):
    return subprocess.run([str(py), "-c", code], cwd=str(tmp_path), env=_env(**env),
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv with `pip install client/python` done in it."""
    d = tmp_path_factory.mktemp("venv")
    p = subprocess.run([sys.executable, "-m", "venv", str(d)], capture_output=True, text=True)
    assert p.returncode == 0, ("python3 -m venv failed (Debian: apt-get install python3-venv):\n"
                               + p.stdout + p.stderr)
    py = d / "bin" / "python"
    p = subprocess.run([str(py), "-m", "pip", "install", "--disable-pip-version-check",
                        "--no-input", "-q", PACKAGE], env=_env(), capture_output=True,
                       text=True, timeout=900)
    assert p.returncode == 0, "pip install client/python failed:\n" + p.stdout + p.stderr
    return py


def test_pip_install_into_a_fresh_venv_imports(venv, tmp_path):
    p = _python(venv, "import importlib.metadata as m, os, numpy, tessera\n"
                      "print(tessera.__version__, m.version('tessera-client'))\n"
                      "print(os.path.dirname(tessera.__file__))\n"
                      "print(os.path.dirname(numpy.__file__))\n"
                      "print(tessera.lib._name)",
                tmp_path, TESSERA_CLIENT_LIB=LIB)
    assert p.returncode == 0, p.stderr
    versions, where, numpy_at, lib = p.stdout.split("\n")[:4]
    assert versions == "%s %s" % (tessera.__version__, tessera.__version__)
    venv_dir = str(venv.parent.parent)
    assert where.startswith(venv_dir) and numpy_at.startswith(venv_dir)
    assert os.path.isfile(os.path.join(where, "py.typed"))
    assert lib == LIB


def test_the_installed_package_runs_the_example(venv, daemon, tmp_path):
    p = subprocess.run([str(venv), os.path.join(ROOT, "examples", "python", "numpy_run.py")],
                       cwd=str(tmp_path), env=_env(TESSERA_URL=daemon.url, TESSERA_CLIENT_LIB=LIB),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "pointwise -> float32 (16, 32), matches numpy" in p.stdout


def _system_has_the_library():
    return (ctypes.util.find_library("tessera-client") is not None
            or os.path.exists("/usr/local/lib/libtessera-client.so"))


def test_import_without_the_library_says_what_to_build(venv, tmp_path):
    if _system_has_the_library():
        pytest.skip("libtessera-client.so is installed on this machine")
    p = _python(venv, "import tessera", tmp_path)
    assert p.returncode != 0
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: tessera: cannot load libtessera-client.so. Build it "
                           "with `make` at the top of the tesserad repository")
    assert "TESSERA_CLIENT_LIB" in last and "(next to the package: missing)" in last
    assert "libtessera-client.so (the system's library paths: " in last


def test_a_missing_TESSERA_CLIENT_LIB_is_named(venv, tmp_path):
    missing = str(tmp_path / "nowhere" / "libtessera-client.so")
    p = _python(venv, "import tessera", tmp_path, TESSERA_CLIENT_LIB=missing)
    assert p.returncode != 0
    assert "Tried: %s ($TESSERA_CLIENT_LIB: missing)" % missing in p.stderr


def test_the_library_next_to_the_package_is_found(venv, tmp_path):
    p = _python(venv, "import importlib.util as u; "
                      "print(u.find_spec('tessera').submodule_search_locations[0])", tmp_path)
    assert p.returncode == 0, p.stderr
    beside = os.path.join(p.stdout.strip(), "libtessera-client.so")
    shutil.copy(LIB, beside)
    try:
        p = _python(venv, "import tessera; print(tessera.lib._name)", tmp_path)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == beside
    finally:
        os.unlink(beside)


def test_a_source_checkout_finds_its_build(tmp_path):
    build = os.path.relpath(os.path.dirname(os.path.dirname(LIB)), ROOT)
    p = _python(sys.executable, "import tessera; print(tessera.lib._name)", tmp_path,
                PYTHONPATH=PACKAGE, BUILD=build)
    assert p.returncode == 0, p.stderr
    assert os.path.samefile(p.stdout.strip(), LIB)


def test_version_is_written_once():
    assert re.fullmatch(r"\d+\.\d+\.\d+", tessera.__version__)
    with open(os.path.join(PACKAGE, "pyproject.toml"), encoding="utf-8") as f:
        pyproject = f.read()
    assert 'dynamic = ["version"]' in pyproject
    assert 'version = {attr = "tessera._version.__version__"}' in pyproject
    found = []
    for top, _, files in os.walk(os.path.join(PACKAGE, "tessera")):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(top, name), encoding="utf-8") as f:
                    found += re.findall(r'^__version__ = "([^"]+)"', f.read(), re.M)
    assert found == [tessera.__version__]


def test_status_names_are_the_librarys():
    for s in tessera.Status:
        assert tessera.lib.tsr_status_name(s.value).decode() == s.name
    assert tessera.lib.tsr_status_name(len(tessera.Status)).decode() != "OK"
    e = tessera.TesseraError(999, "later code")
    assert e.code == 999 and str(e) == "999: later code"


def _public(obj):
    for name, member in vars(obj).items():
        if name.startswith("_") or not (inspect.isfunction(member) or
                                        isinstance(member, (property, classmethod))):
            continue
        yield name, member


def test_every_public_function_and_class_has_a_docstring():
    from tessera import torch_support
    missing = []
    for name in tessera.__all__:
        obj = getattr(tessera, name)
        if isinstance(obj, str):
            continue
        if not (obj.__doc__ or "").strip():
            missing.append(name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attr, member in _public(obj):
                fn = member.__func__ if isinstance(member, classmethod) else member
                if not (fn.__doc__ or "").strip():
                    missing.append("%s.%s" % (name, attr))
    if not (torch_support.run.__doc__ or "").strip():
        missing.append("torch_support.run")
    assert missing == []
    assert "torch_run" not in tessera.Client.run.__doc__


def test_public_functions_carry_type_hints():
    unhinted = []
    for name in tessera.__all__:
        obj = getattr(tessera, name)
        fns = []
        if inspect.isfunction(obj):
            fns.append((name, obj))
        elif inspect.isclass(obj) and not issubclass(obj, (BaseException, int)):
            fns += [("%s.%s" % (name, a), m) for a, m in _public(obj) if inspect.isfunction(m)]
        for label, fn in fns:
            sig = inspect.signature(fn)
            params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
            if sig.return_annotation is inspect.Signature.empty or any(
                    p.annotation is inspect.Parameter.empty for p in params):
                unhinted.append(label)
    assert unhinted == []


def test_the_compile_backend_entry_point_is_installed(venv, tmp_path):
    """torch.compile(backend="tessera") finds the backend through this entry
    point in an installed package, with no import of tessera first."""
    p = _python(venv, "import importlib.metadata as m\n"
                      "for e in m.entry_points(group='torch_dynamo_backends'):\n"
                      "    print(e.name, e.value)", tmp_path, TESSERA_CLIENT_LIB=LIB)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["tessera tessera.torch_backend:tessera_backend"]


def test_the_torch_modules_are_documented_and_hinted():
    pytest.importorskip("torch")
    from tessera import torch_backend, torch_ops
    missing, unhinted = [], []
    for mod in (torch_ops, torch_backend):
        if not (mod.__doc__ or "").strip():
            missing.append(mod.__name__)
        for name in mod.__all__:
            obj = getattr(mod, name)
            label = "%s.%s" % (mod.__name__, name)
            fns = []
            if inspect.isfunction(obj):
                fns.append((label, obj))
            elif inspect.isclass(obj):
                fns += [("%s.%s" % (label, a), m) for a, m in _public(obj)
                        if inspect.isfunction(m)]
            if not inspect.isfunction(obj) and not inspect.isclass(obj):
                continue
            if not (obj.__doc__ or "").strip():
                missing.append(label)
            for fl, fn in fns:
                if not (fn.__doc__ or "").strip():
                    missing.append(fl)
                sig = inspect.signature(fn)
                params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
                if sig.return_annotation is inspect.Signature.empty or any(
                        p.annotation is inspect.Parameter.empty for p in params):
                    unhinted.append(fl)
    assert missing == [] and unhinted == []
