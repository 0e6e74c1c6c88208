#!/usr/bin/env bash
# Runs the Python client's pytest suite (client/python/tests) against the built
# daemon and client library ($BUILD, default build), with the first interpreter
# that has numpy and pytest (tools/find-python.sh). pytest's exit 5 ("no tests
# collected") is a failure here: the suite must not silently vanish. The suite
# installs the package into a fresh venv (`pip install client/python`, numpy
# from PyPI), which needs the interpreter's venv module: Debian's python3-venv,
# installed here when missing and run as root. The torch tests (custom ops, the
# compile backend) need torch: when that interpreter lacks it, a venv over it
# (its site packages visible, so numpy and pytest stay Debian's) gets torch from
# PyPI once, at $TESSERA_TORCH_VENV (default ~/.cache/tesserad/torch-venv), and
# runs the suite; where torch cannot be installed those tests skip, saying so.
set -u
cd "$(dirname "$0")/.."
. tools/find-python.sh
find_python numpy pytest
if [ -z "$py" ]; then
    echo "tools/python-test.sh: no python3 with numpy and pytest (tools/install-deps.sh installs them)" >&2
    exit 1
fi
if ! "$py" -c "import ensurepip, venv" >/dev/null 2>&1 && [ "$py" = /usr/bin/python3 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        echo "installing: python3-venv"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update && apt-get install -y --no-install-recommends python3-venv
    else
        echo "tools/python-test.sh: python3 has no venv module; install python3-venv as root" >&2
    fi
fi
if ! "$py" -c "import torch" >/dev/null 2>&1; then
    venv=${TESSERA_TORCH_VENV:-$HOME/.cache/tesserad/torch-venv}
    if ! "$venv/bin/python" -c "import torch, numpy, pytest" >/dev/null 2>&1; then
        echo "installing: torch into $venv"
        "$py" -m venv --system-site-packages "$venv" && "$venv/bin/pip" install -q torch ||
            echo "tools/python-test.sh: torch could not be installed; the torch tests skip" >&2
    fi
    if "$venv/bin/python" -c "import torch, numpy, pytest" >/dev/null 2>&1; then
        py=$venv/bin/python
    fi
fi
export BUILD=${BUILD:-build}
export TESSERA_CLIENT_LIB=${TESSERA_CLIENT_LIB:-$PWD/$BUILD/client/libtessera-client.so}
"$py" -m pytest -q -p no:cacheprovider client/python/tests "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "tools/python-test.sh: pytest collected no tests" >&2
fi
exit "$rc"
