#!/usr/bin/env bash
# build-image.sh — builds the tesserad image from deploy/Containerfile (`make
# image` runs it).
#
#   deploy/build-image.sh [IMAGE]        # default tesserad:VERSION (daemon/config.h)
#   deploy/build-image.sh --context-only # stage the build context, build nothing
#
# The build context is staged in $BUILD/image-context (BUILD defaults to
# build) from what git sees: tracked files and untracked ones that are not
# ignored, as they are in the work tree, so build outputs never travel to the
# engine. Without git the work tree is staged less build/ and .git/.
#
# The engine is podman when installed, else docker (CONTAINER_ENGINE=podman or
# docker picks one). With neither, or with a docker whose daemon does not
# answer, it says so and exits 1 after staging the context, printing the
# command to run where an engine is. The image needs the network for Debian's
# packages and PyPI while it builds.
set -euo pipefail
cd "$(dirname "$0")/.."

build=${BUILD:-build}
version=$(sed -n 's/^#define TSRD_VERSION "\(.*\)"/\1/p' daemon/config.h)
context_only=false
if [ "${1:-}" = --context-only ]; then
    context_only=true
    shift
fi
image=${1:-tesserad:$version}
context=$build/image-context

# ---- the context ----
rm -rf "$context"
mkdir -p "$context"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # Deleted-but-tracked files are listed by --cached; keep only those present.
    git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
        tar -c --null -T - -f - | tar -x -C "$context" -f -
else
    tar -c --exclude=./build --exclude=./.git -f - . | tar -x -C "$context" -f -
fi
echo "build-image: context staged in $context ($(du -sh "$context" | cut -f1))"
$context_only && exit 0

# ---- the engine ----
engine=${CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
    for e in podman docker; do
        if command -v "$e" >/dev/null 2>&1; then
            engine=$e
            break
        fi
    done
fi
build_cmd=(build -f "$context/deploy/Containerfile" --build-arg "VERSION=$version" -t "$image" "$context")
if [ -z "$engine" ]; then
    echo "build-image: neither podman nor docker is installed, so the image cannot be built on this machine." >&2
    echo "build-image: where one is, run: podman ${build_cmd[*]}   (or docker ${build_cmd[*]})" >&2
    exit 1
fi
if ! command -v "$engine" >/dev/null 2>&1; then
    echo "build-image: CONTAINER_ENGINE=$engine is not installed" >&2
    exit 1
fi
if [ "$engine" = docker ] && ! docker info >/dev/null 2>&1; then
    echo "build-image: docker is installed but its daemon does not answer (docker info fails), so the image cannot be built here." >&2
    echo "build-image: start the docker daemon, or install podman, and run make image again" >&2
    exit 1
fi
echo "build-image: $engine ${build_cmd[*]}"
"$engine" "${build_cmd[@]}"
echo "build-image: built $image"
