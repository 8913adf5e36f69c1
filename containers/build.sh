#!/usr/bin/env bash
# containers/build.sh ENGINE BASE_IMAGE BUILD_ARGS...: `ENGINE build BUILD_ARGS...`, what
# `make image-cpu` and `make image` run. With podman, where it cannot run a container
# of BASE_IMAGE here (crun refused rlimits or cgroups: a sandbox, a build inside a
# container), the RUN steps would fail the same way: the build then runs with
# --isolation chroot (as t7001 builds), and says so. BUILD_ARGS that name an
# --isolation are left as they are.
set -euo pipefail
[ $# -ge 3 ] || {
    echo "usage: containers/build.sh ENGINE BASE_IMAGE BUILD_ARGS..." >&2
    exit 2
}
engine=$1 base=$2
shift 2
extra=()
if [ "$(basename "$engine")" = podman ] && [[ " $* " != *" --isolation"* ]]; then
    if ! err=$("$engine" run --rm --pull=never "$base" true 2>&1); then
        echo "build: podman cannot run a container here ($(printf '%s\n' "$err" | tail -n 1)): building with --isolation chroot"
        extra=(--isolation chroot)
    fi
fi
set -x
exec "$engine" build "${extra[@]}" "$@"
