#!/usr/bin/env bash
# Runs the Python client's pytest suite (client/python/tests) against the built
# daemon and client library ($BUILD, default build), with the first interpreter
# that has numpy and pytest (tools/find-python.sh). pytest's exit 5 ("no tests
# collected") is a failure here: the suite must not silently vanish.
set -u
cd "$(dirname "$0")/.."
. tools/find-python.sh
find_python numpy pytest
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
