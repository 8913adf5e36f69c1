#!/usr/bin/env bash
# t7001: the container images (containers/), built and tried on a Debian 12 base
# made here with debootstrap (no registry is needed; cached in the repository's
# build/containers/ and in podman's storage):
# - containers/Dockerfile.cpu builds with podman (chroot isolation), tagged with a key
#   of the source (HEAD + the uncommitted changes): a later run of the same
#   source reuses the images and runs every check again (CI runs this test once:
#   its ASan pass leaves it out, TR_TEST_EXCLUDE);
# - its labels (version, revision = the git hash given), a non-root user, no compiler
#   or -dev package, much smaller than its build stage, every library resolves;
# - inside it (buildah run): terarec --version prints the label's hash, the built-in
#   demo (terarec train) completes, and the build stage passes make test-unit;
# - the enroot path: the image's filesystem packed as enroot import packs it
#   (mksquashfs), unpacked as enroot create does (unsquashfs), and started as enroot
#   start does (a private mount namespace, /proc /sys /dev /dev/shm /tmp, read-only
#   root, a --mount for /work, the image's environment plus SLURM/PMIx variables,
#   the caller's uid 1000): --version and the demo train run there;
# - containers/Dockerfile (CUDA) builds with WITH_CUDA=0 on the same base, starting
#   from Dockerfile.cpu's cached package layer, and runs; install_cuda.sh is linted
#   (by shellcheck where installed). Its CUDA parts cannot run here (no CUDA repository).
# Older terarec-test images (other source keys) are removed. SKIPs only when podman,
# buildah, debootstrap or mksquashfs are missing or this is not root.
# run.sh: long
# run.sh: holds podman (its storage; t7002 runs the image this test leaves)
. "$(dirname "$0")/lib.sh"

reason=
for c in podman buildah debootstrap mksquashfs unsquashfs unshare git; do
    command -v "$c" >/dev/null || { reason="$c is not installed (make deps installs it)"; break; }
done
[ -z "$reason" ] && [ "$(id -u)" -ne 0 ] && reason="not root (debootstrap, chroot builds and mounts need root)"
[ -z "$reason" ] && ! git -C "$TR_ROOT" rev-parse HEAD >/dev/null 2>&1 && reason="$TR_ROOT is not a git checkout"
[ -z "$reason" ] && ! podman info >/dev/null 2>&1 && reason="podman cannot run here: $(podman info 2>&1 | tail -n 1)"
if [ -n "$reason" ]; then
    skip "container images" "$reason"
    done_testing
fi

CDIR=$TR_ROOT/build/containers      # the repository's build/, also for TR_BUILD=build-asan
mkdir -p "$CDIR"
BASE=localhost/terarec-base:debian12
MIRROR=${TR_DEBIAN_MIRROR:-http://deb.debian.org/debian}
VERSION=$(sed -n 's/^VERSION := //p' "$TR_ROOT/Makefile")
HASH=$(git -C "$TR_ROOT" rev-parse --short=12 HEAD)
# the source key: HEAD (not only its tree: the images carry the commit's hash, in the
# label and in terarec --version), and a hash of what differs from it (changes, untracked files)
dirty=$( (cd "$TR_ROOT" && git diff HEAD && git ls-files --others --exclude-standard -z |
    xargs -0 -r sha256sum) | sha256sum | cut -c1-8)
KEY=$HASH-$dirty
IMG=localhost/terarec-test:$KEY
IMG_BUILD=localhost/terarec-test-build:$KEY
IMG_CUDA0=localhost/terarec-test-cuda0:$KEY
# (the CUDA Dockerfile's build stage is tagged only so that removing the tag removes its layers)
IMG_CUDA0_BUILD=localhost/terarec-test-cuda0-build:$KEY
echo "# source key $KEY (git $HASH), images $IMG, $IMG_BUILD, $IMG_CUDA0"

CTRS=()
cleanup() {
    local c
    for c in "${CTRS[@]}"; do buildah rm "$c" >/dev/null 2>&1; done
    rm -rf "$TMP"
}
trap cleanup EXIT
# ctr IMAGE: a buildah working container of IMAGE (removed at exit), name in $C
ctr() { C=$(buildah from --pull-never "$1" 2>"$TMP/ctr.err") && CTRS+=("$C") || { cat "$TMP/ctr.err"; return 1; }; }
inside() { buildah run --isolation chroot "$C" -- "$@"; }
mb() { podman image inspect --format '{{.Size}}' "$1" | awk '{printf "%d", $1 / 1e6}'; }

# ---- the Debian 12 base ---------------------------------------------------------------------
if podman image exists "$BASE"; then
    echo "# base image $BASE is in podman's storage"
else
    tarball=$CDIR/debian12-minbase.tar
    if [ ! -s "$tarball" ]; then
        t0=$SECONDS
        if ! timeout 900 debootstrap --variant=minbase bookworm "$TMP/rootfs" "$MIRROR" >"$TMP/debootstrap.log" 2>&1; then
            fail "debootstrap a Debian 12 base from $MIRROR" "$(tail -n 5 "$TMP/debootstrap.log")"
            done_testing
        fi
        # as in Debian's own images: no package lists or downloads
        rm -rf "$TMP"/rootfs/var/lib/apt/lists/* "$TMP"/rootfs/var/cache/apt/*.bin "$TMP"/rootfs/var/cache/apt/archives/*.deb
        tar -C "$TMP/rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
        rm -rf "$TMP/rootfs"
        echo "# debootstrap --variant=minbase bookworm: $((SECONDS - t0)) s, $tarball"
    fi
    if ! out=$(podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' "$tarball" "$BASE" 2>&1); then
        fail "podman import of the base" "$out"
        done_testing
    fi
    echo "# imported $tarball as $BASE"
fi

# ---- the images ---------------------------------------------------------------------------
# build TAG DOCKERFILE BUILD-ARG...: podman build unless TAG exists; the log in $TMP/TAG.log
build() {
    local tag=$1 file=$2 log="$TMP/$(basename "${1%%:*}").log"
    shift 2
    if podman image exists "$tag"; then
        echo "# $tag exists (built from this source before): reused"
        REUSED=1
        return 0
    fi
    local t0=$SECONDS
    if timeout 1200 podman build --isolation chroot -f "$TR_ROOT/$file" --build-arg BASE_IMAGE="$BASE" \
        --build-arg VERSION="$VERSION" --build-arg GIT_HASH="$HASH" \
        --build-arg BUILD_DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$@" -t "$tag" "$TR_ROOT" >"$log" 2>&1; then
        echo "# built $tag from $file in $((SECONDS - t0)) s"
    else
        echo "# podman build of $file failed after $((SECONDS - t0)) s:"
        tail -n 25 "$log" | sed 's/^/#   /'
        return 1
    fi
}
if build "$IMG" containers/Dockerfile.cpu && build "$IMG_BUILD" containers/Dockerfile.cpu --target build; then
    ok "containers/Dockerfile.cpu builds (runtime and build stages)"
    echo "$IMG" >"$CDIR/image-cpu" # for t7002, which runs terarec train's programs in it
else
    fail "containers/Dockerfile.cpu builds"
    done_testing
fi

label() { podman image inspect --format "{{index .Config.Labels \"org.opencontainers.image.$2\"}}" "$1"; }
v=$(label "$IMG" version) r=$(label "$IMG" revision) t=$(label "$IMG" title) d=$(label "$IMG" created)
[ "$v" = "$VERSION" ] && [ "$r" = "$HASH" ] && [ "$t" = terarec ] && [ -n "$d" ] &&
    ok "labels: title $t, version $v, revision $r (the git hash given), created $d" ||
    fail "labels" "title '$t' version '$v' (want $VERSION) revision '$r' (want $HASH) created '$d'"

ctr "$IMG" || { fail "buildah from $IMG"; done_testing; }
user=$(podman image inspect --format '{{.Config.User}}' "$IMG")
ids=$(inside sh -c 'echo "$(id -u) $(id -un) $(pwd) $(test -w . && echo writable)"' 2>&1)
[ "$user" = terarec ] && [ "$ids" = "1000 terarec /work writable" ] &&
    ok "runs as the non-root user terarec (uid 1000) in a writable /work" ||
    fail "non-root user" "Config.User '$user'; inside: $ids"

devs=$(inside sh -c 'for c in gcc cc nvcc make; do command -v $c; done; ls /usr/include/jansson.h 2>/dev/null;
    dpkg-query -W -f "\${db:Status-Abbrev} \${Package}\n" | awk "\$1 == \"ii\" && \$2 ~ /-dev\$/ {print \$2}"' 2>&1)
[ -z "$devs" ] && ok "runtime image: no compiler, no headers, no -dev package" ||
    fail "runtime image has build tools" "$(echo "$devs" | head -n 5 | tr '\n' ' ')"

rs=$(mb "$IMG") bs=$(mb "$IMG_BUILD")
[ "$rs" -gt 0 ] && [ $((rs * 2)) -lt "$bs" ] &&
    ok "runtime image $rs MB, less than half its build stage ($bs MB)" ||
    fail "runtime image size" "runtime $rs MB, build stage $bs MB"

missing=$(inside sh -c 'for f in /opt/terarec/bin/* $(find /opt/terarec -name "*.so"); do
    ldd "$f" | grep "not found" | sed "s|^|$f: |"; done' 2>&1)
nbin=$(inside sh -c 'ls /opt/terarec/bin | wc -l')
[ -z "$missing" ] && [ "${nbin:-0}" -ge 4 ] && ok "ldd inside: every library of the $nbin programs resolves" ||
    fail "ldd inside" "${missing:-only $nbin programs}"

ver=$(inside terarec --version 2>&1)
echo "$ver" | grep -q "^terarec $VERSION (git $HASH)" && echo "$ver" | grep -q '^backends: cpu$' &&
    ok "terarec --version inside: git $HASH, as the label" || fail "terarec --version inside" "$ver"

# the demo: no model flags; --db and the run's logs under the writable /work
out=$(inside sh -c 'cd /work && terarec train --db /work/runs.db' 2>&1); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -qE '^terarec: run [0-9-]+[0-9a-f]+ completed$' &&
    ok "terarec train (the built-in demo) completes inside ($(echo "$out" | grep -o 'auc [0-9.]*'))" ||
    fail "terarec train inside" "rc $rc: $(echo "$out" | tail -n 5)"

ctr "$IMG_BUILD" || fail "buildah from $IMG_BUILD"
t0=$SECONDS
out=$(inside make test-unit CUDA=0 NCCL=0 GIT_HASH="$HASH" 2>&1); rc=$?
total=$(echo "$out" | grep -E '^total: ' | tail -n 1)
[ $rc -eq 0 ] && echo "$total" | grep -qE '^total: [1-9][0-9]* passed, 0 failed' &&
    ok "make test-unit in the build stage: $total ($((SECONDS - t0)) s)" ||
    fail "make test-unit in the build stage" "rc $rc: $(echo "$out" | grep -E '^(FAIL|total)' | tail -n 8)"

# ---- the enroot path ------------------------------------------------------------------------
# enroot import dockerd:// (src/docker.sh): the container's files, /etc/environment
# from the image's Env, /etc/rc from its WorkingDir and Cmd, then
# mksquashfs ROOTFS IMAGE -all-root $ENROOT_SQUASH_OPTIONS (default -comp lzo -noD -exit-on-error)
ctr "$IMG" && mnt=$(buildah mount "$C") || { fail "buildah mount $IMG"; done_testing; }
podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$IMG" | grep . >"$mnt/etc/environment"
wd=$(podman image inspect --format '{{.Config.WorkingDir}}' "$IMG")
cat >"$mnt/etc/rc" <<EOF
mkdir -p "${wd:-/}" 2> /dev/null
cd "${wd:-/}" && unset OLDPWD || exit 1
if [ \$# -gt 0 ]; then exec "\$@"; else exec terarec --version; fi
EOF
t0=$SECONDS
if out=$(mksquashfs "$mnt" "$TMP/terarec.sqsh" -all-root -no-progress -noappend -comp lzo -noD -exit-on-error 2>&1) &&
    out2=$(unsquashfs -no-progress -user-xattrs -d "$TMP/enroot-rootfs" "$TMP/terarec.sqsh" 2>&1); then
    ok "mksquashfs (as enroot import) and unsquashfs (as enroot create): $(du -m "$TMP/terarec.sqsh" | cut -f1) MB squashfs, $((SECONDS - t0)) s"
else
    fail "mksquashfs / unsquashfs" "$(echo "$out ${out2:-}" | tail -n 5)"
    done_testing
fi
buildah umount "$C" >/dev/null

# enroot_start ENV-FILE CMD...: as `enroot start --mount $TMP/work:/work` would, in a
# private mount namespace: the system mounts of enroot's conf/mounts/10-system.fstab
# and 20-config.fstab, the root read-only, the image's environment plus ENV-FILE,
# /etc/rc as uid 1000 (enroot keeps the caller's uid; here the image's user)
R=$TMP/enroot-rootfs
mkdir -p "$TMP/work" && chown 1000:1000 "$TMP/work"
enroot_start() {
    local envfile=$1
    shift
    unshare --mount --propagation private --fork -- bash -euc '
        R=$1 W=$2 E=$3; shift 3
        mkdir -p "$R/dev" "$R/proc" "$R/sys"
        mount --bind "$R" "$R"
        mount --rbind /proc "$R/proc"
        mount --rbind /sys "$R/sys" && mount -o remount,bind,ro "$R/sys"
        mount --rbind /dev "$R/dev"
        mount --bind /dev/shm "$R/dev/shm"
        mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/tmp"
        mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$R/run"
        for f in /etc/hosts /etc/hostname /etc/resolv.conf; do
            [ -e "$f" ] && touch "$R$f" 2>/dev/null && mount --bind -o ro "$f" "$R$f"
        done
        mount --bind "$W" "$R/work"
        mount -o remount,bind,ro,nosuid,nodev "$R"
        exec chroot --userspec=1000:1000 "$R" env -i $(cat "$R/etc/environment" "$E") HOME=/home/terarec \
            /bin/sh /etc/rc "$@"
    ' enroot-start "$R" "$TMP/work" "$envfile" "$@"
}
# what enroot's hook 50-slurm-pmi.sh passes into a job step's container (all of
# SLURM_* and PMIX_*, plus PMIX_MCA_* from PMIX_*_MODULE/_MODE), for task 0 of 2
cat >"$TMP/step.env" <<'EOF'
SLURM_JOB_ID=4242
SLURM_JOB_NODELIST=node[1-2]
SLURM_STEP_ID=0
SLURM_PROCID=0
SLURM_LOCALID=0
SLURM_NODEID=0
SLURM_NTASKS=2
SLURM_MPI_TYPE=pmix
PMIX_NAMESPACE=slurm.pmix.4242.0
PMIX_RANK=0
PMIX_SERVER_URI41=pmix-server.1234;tcp4://127.0.0.1:9
PMIX_MCA_psec=native
PMIX_MCA_gds=hash
EOF
# for the demo train, only the task's SLURM variables: with SLURM_JOB_ID and
# SLURM_JOB_NODELIST both set, terarec train launches with srun (there is no SLURM
# here), and PMIX_NAMESPACE without a PMIx server to answer fails a worker's PMIx_Init
grep -vE '^(SLURM_JOB_NODELIST|PMIX_)' "$TMP/step.env" >"$TMP/task.env"
out=$(enroot_start "$TMP/step.env" sh -c 'terarec --version && id -u && env' 2>&1)
echo "$out" | grep -q "^terarec $VERSION (git $HASH)" && echo "$out" | grep -qx 1000 &&
    echo "$out" | grep -qx 'PMIX_RANK=0' && echo "$out" | grep -qx 'SLURM_JOB_NODELIST=node\[1-2\]' &&
    echo "$out" | grep -qx 'PATH=/opt/terarec/bin:.*' &&
    ok "enroot-style start: terarec --version as uid 1000, with the image's PATH and the SLURM/PMIx variables" ||
    fail "enroot-style start: --version" "$(echo "$out" | tail -n 8)"
out=$(enroot_start "$TMP/task.env" terarec train --db /work/runs.db 2>&1); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -qE '^terarec: run [0-9-]+[0-9a-f]+ completed$' && [ -s "$TMP/work/runs.db" ] &&
    ok "enroot-style start: the demo train completes (read-only root, /work mounted, run history in it)" ||
    fail "enroot-style start: terarec train" "rc $rc: $(echo "$out" | tail -n 6)"
left=$(grep -c " $TMP" /proc/self/mountinfo)
[ "$left" -eq 0 ] && ok "no mounts left behind (the namespace ended with its process)" ||
    fail "mounts left behind" "$(grep " $TMP" /proc/self/mountinfo | head -n 3)"

# ---- containers/Dockerfile (CUDA) -----------------------------------------------------------
# podman build parses the whole file (both stages, every instruction) and runs all
# but install_cuda.sh (WITH_CUDA=0); its first instructions are Dockerfile.cpu's, so
# the package layer comes from that build's cache
cpu_head=$(sed -n '/^FROM .* AS build/,/make deps-build/p' "$TR_ROOT/containers/Dockerfile.cpu" | grep -v '^#')
gpu_head=$(sed -n '/^FROM .* AS build/,/make deps-build/p' "$TR_ROOT/containers/Dockerfile" | grep -v '^#')
[ -n "$cpu_head" ] && [ "$cpu_head" = "$gpu_head" ] &&
    ok "containers/Dockerfile starts as Dockerfile.cpu up to the package layer (shared cache)" ||
    fail "Dockerfile and Dockerfile.cpu differ before the package layer" "$(diff <(echo "$cpu_head") <(echo "$gpu_head") | head -n 5)"
if command -v shellcheck >/dev/null; then
    check "containers/install_cuda.sh passes shellcheck" shellcheck "$TR_ROOT/containers/install_cuda.sh"
else
    check "containers/install_cuda.sh parses (bash -n; shellcheck is not installed)" bash -n "$TR_ROOT/containers/install_cuda.sh"
fi
t0=$SECONDS REUSED=0
if build "$IMG_CUDA0" containers/Dockerfile --build-arg WITH_CUDA=0 &&
    build "$IMG_CUDA0_BUILD" containers/Dockerfile --build-arg WITH_CUDA=0 --target build; then
    cached=$(grep -c '^--> Using cache' "$TMP/terarec-test-cuda0.log" 2>/dev/null)
    [ "$REUSED" = 1 ] && how="built from this source before" ||
        how="$((SECONDS - t0)) s, ${cached:-0} of its steps from the cache"
    ok "containers/Dockerfile builds with WITH_CUDA=0 ($how)"
    ctr "$IMG_CUDA0" && ver=$(inside terarec --version 2>&1)
    echo "${ver:-}" | grep -q "^terarec $VERSION (git $HASH)" && echo "$ver" | grep -q 'cuda: no' &&
        ok "its image runs terarec --version ($(mb "$IMG_CUDA0") MB)" || fail "CUDA Dockerfile's image: --version" "${ver:-}"
else
    fail "containers/Dockerfile builds with WITH_CUDA=0"
fi

# ---- older images of this test ----------------------------------------------------------------
old=$(podman images --format '{{.Repository}}:{{.Tag}}' |
    grep -E '^localhost/terarec-test(-build|-cuda0|-cuda0-build)?:' | grep -v ":$KEY\$" || true)
if [ -n "$old" ]; then
    # shellcheck disable=SC2086
    podman rmi $old >/dev/null 2>&1 || true
    echo "# removed older test images: $(echo $old | tr '\n' ' ')"
fi
done_testing
