#!/usr/bin/env bash
# Installs the Debian packages tesserad needs to build, run and test, and only
# those that are missing (checked with dpkg -s), then builds the pinned nng
# release (tools/nng.sh: fetched once, checksummed, kept under build/deps), so a
# ready machine does nothing and needs no network. Run as root. With --ci it
# also installs what the CI script needs besides (clang-format for `make
# format-check`, git). python3-yaml and python3-venv are for `make k8s-check`;
# redis-server and openssl for the fleet cache's tests (tests/e2e/fleet_cache_test.c
# starts its own servers, plain and TLS; the packaged service is not used).
set -euo pipefail

packages=(build-essential pkg-config cmake libcjson-dev libuv1-dev libprotobuf-c-dev
          protobuf-c-compiler libcriterion-dev libmbedtls-dev libsystemd-dev libhiredis-dev
          python3-numpy python3-pytest python3-yaml python3-venv xxd
          redis-server openssl)
# pip fetches nng's source distribution (tools/nng.sh); a python3 without it gets Debian's.
python3 -m pip --version >/dev/null 2>&1 || packages+=(python3-pip)
if [ "${1:-}" = "--ci" ]; then
    packages+=(clang-format git systemd)
elif [ $# -gt 0 ]; then
    echo "usage: tools/install-deps.sh [--ci]" >&2
    exit 2
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg -s "$p" >/dev/null 2>&1; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "tools/install-deps.sh: missing packages: ${missing[*]}; run as root to install them" >&2
        exit 1
    fi
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

"$(dirname "$0")/nng.sh"
