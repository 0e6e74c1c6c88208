#!/usr/bin/env bash
# entrypoint.sh — the tesserad image's entrypoint (installed as
# /usr/local/bin/tesserad-entrypoint by deploy/Containerfile).
#
#   tesserad-entrypoint [TESSERAD FLAG]...
#
# Runs `tesserad --config $TESSERAD_CONFIG FLAG...` in its own place (exec, so
# tesserad is the container's process 1 and gets SIGTERM and SIGHUP itself),
# after checking what a pod gets wrong most often, so that the failure names
# its Kubernetes cause instead of a bare "Permission denied":
#
#   - the config file is readable (the ConfigMap is mounted);
#   - the directory of every ipc:// socket and the kernel cache directory
#     exist (or can be made) and this user can write them: hostPath volumes
#     are created root-owned and fsGroup does not change them, which is what
#     the DaemonSet's initContainer is for;
#   - with the cuda backends, the NVIDIA device files are there (the pod runs
#     with the nvidia runtime class and NVIDIA_VISIBLE_DEVICES); this is only
#     a warning, tesserad's own error follows.
#
# The socket and cache directories come from the flags when given (--listen,
# --cache-dir: flags override the config, as for tesserad itself), else from
# the config, else tesserad's defaults. tools/k8s-check.sh runs this script
# with the ConfigMap's config and those two flags pointing into a temporary
# directory.
#
# Environment: TESSERAD_CONFIG (default /etc/tesserad/tesserad.json; a
# --config flag wins), TESSERAD_BIN (default: tesserad on the PATH).
# Exit status: tesserad's own, or 1 when a check fails (before tesserad runs).
set -euo pipefail

prog="tesserad-entrypoint"
tesserad=${TESSERAD_BIN:-tesserad}
config=${TESSERAD_CONFIG:-/etc/tesserad/tesserad.json}
uid=$(id -u)
gid=$(id -g)

fail() {
    echo "$prog: $*" >&2
    exit 1
}

# The flags this script looks at; every flag is passed on unchanged.
flag_listen=()
flag_cache=
flag_backend=
flag_config=
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
    next=${args[i + 1]:-}
    case ${args[i]} in
        --help | -h | --version | --hash-token) exec "$tesserad" "$@" ;;
        --listen) flag_listen+=("$next") ;;
        --cache-dir) flag_cache=$next ;;
        --backend) flag_backend=$next ;;
        --config) flag_config=$next ;;
    esac
done
config_args=(--config "$config")
if [ -n "$flag_config" ]; then
    config=$flag_config
    config_args=()
fi

command -v "$tesserad" >/dev/null 2>&1 || fail "cannot find the tesserad program '$tesserad'"
[ -r "$config" ] ||
    fail "cannot read the config $config as uid $uid (is the tesserad-config ConfigMap mounted at $(dirname "$config")?)"

# The values of one JSON string key, and every ipc:// URL, read from the config
# with grep: enough for these checks (tesserad parses the file properly and
# refuses a bad one with its own message).
config_text=$(tr '\n' ' ' <"$config")
config_string() {
    grep -o "\"$1\"[[:space:]]*:[[:space:]]*\"[^\"]*\"" <<<"$config_text" |
        sed 's/.*:[[:space:]]*"\(.*\)"$/\1/' | head -n 1 || true
}

sockets=()
if [ ${#flag_listen[@]} -gt 0 ]; then
    for url in "${flag_listen[@]}"; do
        case $url in ipc://*) sockets+=("${url#ipc://}") ;; esac
    done
elif grep -q '"listen"' <<<"$config_text"; then
    while read -r url; do
        [ -n "$url" ] && sockets+=("${url#ipc://}")
    done < <(grep -o 'ipc://[^"]*' <<<"$config_text" || true)
else
    sockets+=(/run/tesserad/tesserad.sock)
fi
cache_dir=${flag_cache:-$(config_string cache_dir)}
cache_dir=${cache_dir:-/var/cache/tesserad}
backend=${flag_backend:-$(config_string backend)}
backend=${backend:-auto}

# A directory this user must be able to create files in.
check_dir() {
    local what=$1 dir=$2
    if [ ! -d "$dir" ]; then
        mkdir -p "$dir" 2>/dev/null ||
            fail "$what $dir does not exist and uid $uid cannot make it (mount the hostPath volume there)"
    fi
    if [ ! -w "$dir" ] || [ ! -x "$dir" ]; then
        fail "$what $dir is owned by $(stat -c '%u:%g, mode %a' "$dir") and uid $uid (gid $gid) cannot write it;" \
            "the initContainer \"prepare-host-dirs\" gives the hostPath directories to the daemon's user (chown $uid:$gid)"
    fi
}

for sock in "${sockets[@]}"; do
    check_dir "the socket directory" "$(dirname "$sock")"
done
check_dir "the kernel cache directory" "$cache_dir"

case $backend in
    cuda | cuda-inprocess)
        if [ ! -e /dev/nvidiactl ]; then
            echo "$prog: warning: backend $backend but no /dev/nvidiactl in this container: the pod needs" \
                "runtimeClassName nvidia and NVIDIA_VISIBLE_DEVICES=all (docs/operations.md, Kubernetes)" >&2
        fi
        ;;
esac

exec "$tesserad" "${config_args[@]}" "$@"
