#!/usr/bin/env bash
# install-check.sh — the installed client library as a user of it sees it: `make
# install` into a scratch root, then a ten-line program built against it through
# pkg-config twice, linked with the shared library and with the static archive,
# each run against a real tesserad. Also checks that the shared library has its
# soname and exports only the public calls. Exit 0 when all of that holds.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
root=$(mktemp -d /tmp/tesserad-install.XXXXXX)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$root"
}
trap cleanup EXIT

make --no-print-directory install BUILD="$build" DESTDIR="$root/dest" PREFIX=/usr/local >/dev/null
lib="$root/dest/usr/local/lib"
export PKG_CONFIG_PATH="$lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root/dest"

fail() { echo "install-check: $*" >&2; exit 1; }
so=$(readlink -f "$lib/libtessera-client.so")
soname=$(objdump -p "$so" | awk '$1 == "SONAME" {print $2}')
[ "$soname" = "libtessera-client.so.0" ] || fail "soname is '$soname', not libtessera-client.so.0"
[ -e "$lib/$soname" ] || fail "$soname is not installed"
others=$(nm -D --defined-only "$so" | awk '$2 != "A" {sub(/@.*/, "", $3); print $3}' |
         grep -Ev '^(tsr_client_|tsr_status_name$|tsr_strerror$|tsr_error_)' || true)
[ -z "$others" ] || fail "the shared library exports more than the client calls: $others"
[ -f "$root/dest/usr/local/share/tessera/tessera.proto" ] || fail "tessera.proto is not installed"

cat >"$root/hello.c" <<'PROGRAM'
#include <stdio.h>
#include <tessera/client.h>
int main(int argc, char **argv)
{
    tsr_client_options opts;
    tsr_client_options_init(&opts);
    opts.url = argc > 1 ? argv[1] : NULL;
    tsr_client *c;
    tsr_client_info info;
    tsr_error err;
    if (tsr_client_connect(&opts, &c, &err) != TSR_OK || tsr_client_hello(c, &info, 5000, &err) != TSR_OK) {
        fprintf(stderr, "%s: %s\n", tsr_status_name(err.code), err.message);
        return 1;
    }
    printf("tesserad %s over nng %s\n", info.daemon_version, info.nng_version);
    tsr_client_close(c);
    return 0;
}
PROGRAM
# shellcheck disable=SC2046
cc -o "$root/hello-shared" "$root/hello.c" $(pkg-config --cflags --libs tessera-client)
# shellcheck disable=SC2046
cc -o "$root/hello-static" "$root/hello.c" $(pkg-config --cflags --libs-only-L tessera-client) \
    -Wl,-Bstatic -ltessera-client -Wl,-Bdynamic \
    $(pkg-config --static --libs-only-l --libs-only-other tessera-client | sed 's/-ltessera-client//')
if ldd "$root/hello-static" | grep -q tessera-client; then
    fail "the static program still loads the shared library"
fi

url="ipc://$root/sock"
"$build/bin/tesserad" --backend cpu --listen "$url" --cache-dir "$root/cache" --log-level warn &
pid=$!
for _ in $(seq 100); do [ -S "$root/sock" ] && break; sleep 0.05; done
LD_LIBRARY_PATH="$lib" "$root/hello-shared" "$url" || fail "the shared build did not talk to tesserad"
"$root/hello-static" "$url" || fail "the static build did not talk to tesserad"
echo "install-check: shared and static builds against the installed client work"
