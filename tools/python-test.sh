#!/usr/bin/env bash
# Runs the Python client's pytest suite (client/python/tests) against the built
# daemon and client library ($BUILD, default build). The interpreter is $PYTHON,
# else /usr/bin/python3 (Debian's, which has python3-numpy and python3-pytest from
# tools/install-deps.sh), else python3 on the PATH. pytest's exit 5 ("no tests
# collected") is a failure here: the suite must not silently vanish.
set -u
cd "$(dirname "$0")/.."
py=${PYTHON:-}
if [ -z "$py" ]; then
    for cand in /usr/bin/python3 python3; do
        if "$cand" -c 'import numpy, pytest' >/dev/null 2>&1; then
            py=$cand
            break
        fi
    done
fi
if [ -z "$py" ]; then
    echo "tools/python-test.sh: no python3 with numpy and pytest (tools/install-deps.sh installs them)" >&2
    exit 1
fi
export BUILD=${BUILD:-build}
export TESSERA_CLIENT_LIB=${TESSERA_CLIENT_LIB:-$PWD/$BUILD/client/libtessera-client.so}
"$py" -m pytest -q -p no:cacheprovider client/python/tests "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "tools/python-test.sh: pytest collected no tests" >&2
fi
exit "$rc"
