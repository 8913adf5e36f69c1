#!/usr/bin/env bash
# containers/base.sh ENGINE IMAGE CACHE_DIR: the images' default base, a Debian 12 made
# here (what `make image-cpu` and `make image` build on unless BASE_IMAGE names
# another, and what tests/integration/t7001 builds on): nothing when ENGINE's storage
# has IMAGE; else `debootstrap --variant=minbase bookworm` from the Debian mirror
# ($TR_DEBIAN_MIRROR, default http://deb.debian.org/debian; needs root), the tree kept
# as CACHE_DIR/debian12-minbase.tar (t7001's cache), imported as IMAGE. No registry
# is needed; a machine that can pull one can skip this with BASE_IMAGE=debian:12.
set -euo pipefail
[ $# -eq 3 ] || {
    echo "usage: containers/base.sh ENGINE IMAGE CACHE_DIR" >&2
    exit 2
}
engine=$1 image=$2 cache=$3
if "$engine" image inspect "$image" >/dev/null 2>&1; then
    echo "base: $image is in $(basename "$engine")'s storage"
    exit 0
fi
tarball=$cache/debian12-minbase.tar
mirror=${TR_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ ! -s "$tarball" ]; then
    if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap >/dev/null; then
        echo "error: the base image $image is not in $(basename "$engine")'s storage, and making it needs root and debootstrap" >&2
        echo "hint: run 'make image-cpu' as root after 'make deps', or build on a registry's image: make image-cpu BASE_IMAGE=debian:12" >&2
        exit 1
    fi
    mkdir -p "$cache"
    root=$(mktemp -d "$cache/rootfs.XXXXXX")
    trap 'rm -rf "$root"' EXIT
    echo "base: debootstrap --variant=minbase bookworm from $mirror (a minute or two; cached as $tarball)"
    if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$cache/debootstrap.log" 2>&1; then
        echo "error: debootstrap of Debian 12 from $mirror failed (log: $cache/debootstrap.log):" >&2
        tail -n 3 "$cache/debootstrap.log" >&2
        echo "hint: TR_DEBIAN_MIRROR=URL names a reachable mirror; or BASE_IMAGE=IMAGE builds on an image you have" >&2
        exit 1
    fi
    # as in Debian's own images: no package lists or downloads
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
    tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
fi
# a tarball sets no environment: the PATH and CMD of Debian's images
"$engine" import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' "$tarball" "$image" >/dev/null
echo "base: imported $tarball as $image"
