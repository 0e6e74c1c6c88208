#!/usr/bin/env bash
# nng.sh — builds the pinned nng release that tesserad, libtessera-client and
# tessera-cli link statically, into PREFIX (default build/deps/nng-1.11.0).
#
# Debian 12 ships nng 1.5.2, in which one connect that closes during the SP
# header exchange silences an ipc or tls+tcp listener for good (nng issue
# #1518, fixed in 1.6.0). The nng 1.11.0 source comes from the source
# distribution of pynng 0.9.0 on PyPI, which carries it as its nng/ folder;
# the archive is checked against the SHA-256 below before anything in it is
# used. It is built with Debian's cmake and mbedTLS (TLS as before), static and
# position-independent so that it links into the client's shared library too.
#
# Does nothing when PREFIX already holds the library. Concurrent calls wait
# for each other (flock). Needs: python3 with pip, cmake, a C compiler,
# libmbedtls-dev (tools/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

NNG_VERSION=1.11.0
PYNNG_VERSION=0.9.0
PYNNG_SHA256=fcd839abf82a2934fa8c27ff57b574b41810458e35895bac6288814defa8fb4e

prefix=${1:-build/deps/nng-$NNG_VERSION}
lib="$prefix/lib/libnng.a"
[ -f "$lib" ] && exit 0

mkdir -p "$(dirname "$prefix")"
exec 9>"$prefix.lock"
flock 9
[ -f "$lib" ] && exit 0

work=$(mktemp -d "${TMPDIR:-/tmp}/tesserad-nng.XXXXXX")
trap 'rm -rf "$work"' EXIT
archive="$work/pynng-$PYNNG_VERSION.tar.gz"

# The archive is kept beside the prefix, so a rebuild after `make clean` of
# the prefix alone needs no network.
cached="$(dirname "$prefix")/pynng-$PYNNG_VERSION.tar.gz"
if [ -f "$cached" ] && echo "$PYNNG_SHA256  $cached" | sha256sum --check --status; then
    cp "$cached" "$archive"
else
    echo "nng: fetching the nng $NNG_VERSION source (pynng $PYNNG_VERSION source distribution)"
    python3 -m pip download --quiet --no-deps --no-binary pynng "pynng==$PYNNG_VERSION" \
        --dest "$work"
fi
if ! echo "$PYNNG_SHA256  $archive" | sha256sum --check --status; then
    echo "nng: pynng-$PYNNG_VERSION.tar.gz does not have the pinned SHA-256 $PYNNG_SHA256" >&2
    exit 1
fi
cp "$archive" "$cached"

tar -xzf "$archive" -C "$work" "pynng-$PYNNG_VERSION/nng"
src="$work/pynng-$PYNNG_VERSION/nng"
IFS=. read -r major minor patch <<<"$NNG_VERSION"
for part in "MAJOR_VERSION $major" "MINOR_VERSION $minor" "PATCH_VERSION $patch"; do
    if ! grep -q "^#define NNG_$part\$" "$src/include/nng/nng.h"; then
        echo "nng: the archive does not hold nng $NNG_VERSION" >&2
        exit 1
    fi
done

echo "nng: building nng $NNG_VERSION (static, TLS through mbedTLS) into $prefix"
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$(realpath -m "$prefix")" -DCMAKE_INSTALL_LIBDIR=lib \
    -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DNNG_ENABLE_TLS=ON -DNNG_TESTS=OFF -DNNG_TOOLS=OFF -DNNG_ENABLE_NNGCAT=OFF \
    >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log" >&2; exit 1; }
cmake --build "$work/build" --parallel "$(nproc 2>/dev/null || echo 2)" >"$work/build.log" 2>&1 ||
    { tail -n 50 "$work/build.log" >&2; exit 1; }
cmake --install "$work/build" >"$work/install.log" 2>&1 || { cat "$work/install.log" >&2; exit 1; }
[ -f "$lib" ] || { echo "nng: $lib was not installed" >&2; exit 1; }
echo "nng: $lib"
