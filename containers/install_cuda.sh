#!/usr/bin/env bash
# install_cuda.sh repo|devel|link: NVIDIA's CUDA apt repository on Debian 12, added through
# its cuda-keyring package, and in "devel" mode the toolkit parts terarec builds with:
# nvcc, the CUDA runtime and cuBLAS with headers, CCCL (CUB) and NCCL (libnccl-dev,
# the build for this CUDA version). "repo" only adds the repository (the runtime
# stage, whose packages come from tools/runtime_deps.sh). Either mode skips what the
# base image already has (an nvidia/cuda devel image: nvcc; a configured repository).
# "link" (and devel) make /usr/local/cuda point at the version installed, where the
# programs' RUNPATH looks (the runtime stage runs it after installing its packages).
# Environment (containers/Dockerfile's build args):
#   CUDA_VERSION  the packages' suffix, e.g. 13-0 (default)
#   CUDA_REPO     the repository (a site's mirror), ending in /
#   CUDA_KEYRING  the keyring package's file in it (default cuda-keyring_1.1-1_all.deb)
set -euo pipefail
mode=${1:-}
case $mode in
repo | devel | link) ;;
*) echo "usage: install_cuda.sh repo|devel|link" >&2; exit 2 ;;
esac
CUDA_VERSION=${CUDA_VERSION:-13-0}
CUDA_REPO=${CUDA_REPO:-https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/}
CUDA_KEYRING=${CUDA_KEYRING:-cuda-keyring_1.1-1_all.deb}
dotted=${CUDA_VERSION/-/.}
export DEBIAN_FRONTEND=noninteractive

link_cuda_home() {
    if [ ! -e /usr/local/cuda ] && [ -d "/usr/local/cuda-$dotted" ]; then
        ln -s "cuda-$dotted" /usr/local/cuda
    fi
}

if [ "$mode" = link ]; then
    link_cuda_home
    exit 0
fi
if [ "$mode" = devel ] && { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }; then
    echo "install_cuda: nvcc is in the base image ($(command -v nvcc || echo /usr/local/cuda/bin/nvcc)): nothing to install"
    exit 0
fi

if grep -rqs "${CUDA_REPO%/}" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "install_cuda: $CUDA_REPO is already an apt source"
else
    apt-get update -qq
    # curl only to fetch the keyring package; removed again
    apt-get install -y -qq --no-install-recommends ca-certificates curl
    tmp=$(mktemp -d)
    if ! curl -fsSL --retry 3 -o "$tmp/$CUDA_KEYRING" "$CUDA_REPO$CUDA_KEYRING"; then
        echo "install_cuda: cannot download $CUDA_REPO$CUDA_KEYRING" >&2
        echo "hint: give a reachable mirror with --build-arg CUDA_REPO=URL/ (and CUDA_KEYRING=FILE)" >&2
        exit 1
    fi
    dpkg -i "$tmp/$CUDA_KEYRING"
    rm -rf "$tmp"
    # the keyring package's source names NVIDIA's host; a mirror replaces it
    if [ "$CUDA_REPO" != "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/" ]; then
        sed -i "s|https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/|$CUDA_REPO|" \
            /etc/apt/sources.list.d/cuda-debian12-x86_64.list
    fi
    apt-get purge -y -qq --autoremove curl
fi
apt-get update -qq

if [ "$mode" = devel ]; then
    # libnccl2/libnccl-dev exist for several CUDA versions: take the newest for this one
    nccl=$(apt-cache madison libnccl-dev | awk -v s="+cuda$dotted" '{ if (index($3, s)) { print $3; exit } }')
    if [ -z "$nccl" ]; then
        echo "install_cuda: $CUDA_REPO has no libnccl-dev built for CUDA $dotted" >&2
        echo "hint: pick a CUDA_VERSION that NCCL is built for (apt-cache madison libnccl-dev)" >&2
        exit 1
    fi
    apt-get install -y -qq --no-install-recommends "cuda-nvcc-$CUDA_VERSION" "cuda-cudart-dev-$CUDA_VERSION" \
        "libcublas-dev-$CUDA_VERSION" "cuda-cccl-$CUDA_VERSION" "libnccl-dev=$nccl" "libnccl2=$nccl"
    link_cuda_home
fi
echo "install_cuda: $mode for CUDA $dotted from $CUDA_REPO done"
