#!/usr/bin/env bash
# fake_docker.sh: `docker run` and `docker rm` for t7002, on machines where no
# container engine runs (here `podman run` fails: crun can set neither rlimits nor
# cgroups in this sandbox). A run is a private mount namespace chrooted into the
# image's filesystem ($FAKE_DOCKER_ROOTFS: the image $FAKE_DOCKER_IMAGE, mounted by
# buildah), with docker's meaning for the flags terarec train passes:
#   -v SRC:DST[:ro]    a bind mount (read-only with ro)
#   -e NAME            NAME with the caller's value
#   --user=U:G         the process's uid and gid
#   --workdir=DIR      its working directory
#   --network=host, --ipc=host   the host's network and /dev/shm
# plus a private /tmp, /proc, /dev and /sys, and the image's own environment
# ($FAKE_DOCKER_ENVFILE, from podman image inspect). Any other flag is refused, so
# a flag the launcher starts passing fails the test until this shim learns it.
# `docker info` answers (exit 0: terarec train's --container_runtime auto picks the
# engine that answers). Every call is appended to $FAKE_DOCKER_LOG.
set -euo pipefail

if [ "${1:-}" = __inner ]; then # inside the new mount namespace: mounts, then chroot
    shift
    root=$FAKE_DOCKER_ROOTFS
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev" # /dev/shm with it: --ipc=host
    mount --rbind /sys "$root/sys"
    mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
    while IFS= read -r m; do
        [ -n "$m" ] || continue
        IFS=: read -r src dst opts <<<"$m"
        if [ -d "$src" ]; then mkdir -p "$root$dst"; else mkdir -p "$(dirname "$root$dst")" && touch "$root$dst"; fi
        mount --bind "$src" "$root$dst"
        if [[ ",${opts:-}," == *,ro,* ]]; then mount -o remount,bind,ro "$root$dst"; fi
    done <<<"$_FD_MOUNTS"
    exec chroot --userspec="$_FD_USER" "$root" /usr/bin/env -i "$@"
fi

echo "docker $*" >>"${FAKE_DOCKER_LOG:-/dev/null}"
case "${1:-}" in
rm) exit 0 ;; # the "container" is the process itself: it went with its client
info) exit 0 ;; # a daemon that answers
run) shift ;;
*)
    echo "fake docker: only run, rm and info" >&2
    exit 125
    ;;
esac
user=0:0 workdir=/ mounts="" envs=()
while [ $# -gt 0 ]; do
    case "$1" in
    --rm | --init | --network=host | --ipc=host | --name=*) ;;
    --user=*) user=${1#--user=} ;;
    --workdir=*) workdir=${1#--workdir=} ;;
    -v)
        mounts+="$2"$'\n'
        shift
        ;;
    -e)
        envs+=("$2")
        shift
        ;;
    -*)
        echo "fake docker: unknown flag $1" >&2
        exit 125
        ;;
    *) break ;;
    esac
    shift
done
[ $# -ge 2 ] || {
    echo "fake docker: run needs IMAGE COMMAND" >&2
    exit 125
}
image=$1
shift
[ "$image" = "${FAKE_DOCKER_IMAGE:-}" ] || {
    echo "fake docker: Unable to find image '$image'" >&2
    exit 125
}
env_args=()
while IFS= read -r kv; do [ -n "$kv" ] && env_args+=("$kv"); done <"$FAKE_DOCKER_ENVFILE"
for n in "${envs[@]}"; do [ -n "${!n+x}" ] && env_args+=("$n=${!n}"); done
export _FD_MOUNTS=$mounts _FD_USER=$user
# the working directory, then the command, under /bin/sh of the image
exec unshare --mount --propagation private -- "$0" __inner "${env_args[@]}" \
    /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$workdir" "$@"
