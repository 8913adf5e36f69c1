#!/usr/bin/env bash
# t7004: what `make image-cpu` runs, without building an image (t7001 builds them):
# - its default base is the Debian 12 made here (containers/base.sh, then build.sh with
#   --build-arg BASE_IMAGE=localhost/terarec-base:debian12); BASE_IMAGE=IMAGE builds on
#   IMAGE and skips base.sh; `make -n image-cpu` leaves the build's flags alone;
# - base.sh, with a stand-in engine: nothing to do when the engine has the image; the
#   cached debootstrap tarball imported under that name (with Debian's PATH) when it
#   does not; without the tarball nor debootstrap, one error and a hint naming
#   BASE_IMAGE=, exit 1;
# - build.sh, with a stand-in podman: --isolation chroot added, and said, when podman
#   cannot run a container of the base; not when it can, nor when the caller named one.
. "$(dirname "$0")/lib.sh"
cd "$TMP" || exit 1

# ---- the Makefile ------------------------------------------------------------------------------
flags_before=$(stat -c %Y "$TR_BUILD/gen/flags" 2>/dev/null)
make -s -C "$TR_ROOT" -n image-cpu CONTAINER_ENGINE=podman >n1.out 2>&1
rc=$?
base_line=$(grep -n '^containers/base.sh podman localhost/terarec-base:debian12 ' n1.out | cut -d: -f1)
build_line=$(grep -n '^containers/build.sh podman localhost/terarec-base:debian12 .*--build-arg BASE_IMAGE=localhost/terarec-base:debian12 .*-f containers/Dockerfile.cpu -t terarec:[0-9.]*-cpu \.$' n1.out | cut -d: -f1)
[ $rc -eq 0 ] && [ -n "$base_line" ] && [ -n "$build_line" ] && [ "$base_line" -lt "$build_line" ] &&
    ok "make image-cpu: base.sh makes the local Debian 12 base, then build.sh builds on it" || fail "make -n image-cpu" "exit $rc: $(cat n1.out)"
make -s -C "$TR_ROOT" -n image-cpu CONTAINER_ENGINE=podman BASE_IMAGE=registry.example.org/debian:12 >n2.out 2>&1
rc=$?
[ $rc -eq 0 ] && ! grep -q base.sh n2.out &&
    grep -q '^containers/build.sh podman registry.example.org/debian:12 .*--build-arg BASE_IMAGE=registry.example.org/debian:12 ' n2.out &&
    ok "make image-cpu BASE_IMAGE=...: that base, no base.sh" || fail "BASE_IMAGE=" "exit $rc: $(cat n2.out)"
[ "$(stat -c %Y "$TR_BUILD/gen/flags" 2>/dev/null)" = "$flags_before" ] && ok "make -n image-cpu leaves the build's flags alone" ||
    fail "flags touched" "build/gen/flags changed"

# ---- base.sh ------------------------------------------------------------------------------------
# eng: a stand-in engine; `image inspect` answers as $HAVE says; every call logged
mkdir -p fake cache
cat >fake/eng <<'SH'
#!/bin/sh
echo "$*" >>"$ENG_LOG"
[ "$1 $2" = "image inspect" ] && { [ -n "${HAVE:-}" ]; exit $?; }
[ "$1" = import ] && exit 0
exit 125
SH
chmod +x fake/eng
export ENG_LOG=$TMP/eng.log
BASE=localhost/terarec-base:debian12
HAVE=1 "$TR_ROOT/containers/base.sh" "$TMP/fake/eng" $BASE "$TMP/cache" >b1.out 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "is in eng's storage" b1.out && [ "$(grep -c . eng.log)" = 1 ] &&
    ok "base.sh: the engine has the base: nothing else done" || fail "base.sh, image present" "exit $rc: $(cat b1.out eng.log)"
: >eng.log
mkdir -p tree/etc && echo bookworm >tree/etc/debian_version && tar -C tree -cf cache/debian12-minbase.tar .
"$TR_ROOT/containers/base.sh" "$TMP/fake/eng" $BASE "$TMP/cache" >b2.out 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "^import --change ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --change CMD \[\"bash\"\] $TMP/cache/debian12-minbase.tar $BASE$" eng.log &&
    ok "base.sh: the cached debootstrap tree imported as $BASE, with Debian's PATH" || fail "base.sh import" "exit $rc: $(cat b2.out eng.log)"
rm -f cache/debian12-minbase.tar
env PATH="$TMP/fake:/usr/bin:/bin" "$TR_ROOT/containers/base.sh" "$TMP/fake/eng" $BASE "$TMP/cache" >b3.out 2>&1
rc=$?
if [ -x /usr/bin/debootstrap ] || [ -x /bin/debootstrap ]; then
    skip "base.sh without debootstrap" "debootstrap is in /usr/bin here"
else
    [ $rc -eq 1 ] && [ "$(grep -c '^error:' b3.out)" = 1 ] && grep -q "making it needs root and debootstrap" b3.out &&
        grep -q "^hint: .*BASE_IMAGE=debian:12" b3.out &&
        ok "base.sh: no base, no tarball, no debootstrap: one error, a hint naming BASE_IMAGE=, exit 1" ||
        fail "base.sh without debootstrap" "exit $rc: $(cat b3.out)"
fi

# ---- build.sh -----------------------------------------------------------------------------------
# podman: `run` fails as crun does in a sandbox (or works: $RUN_OK); `build` prints its arguments
cat >fake/podman <<'SH'
#!/bin/sh
case "$1" in
run) [ -n "${RUN_OK:-}" ] && exit 0
     echo "Error: crun: setrlimit \`RLIMIT_NOFILE\`: Operation not permitted: OCI permission denied" >&2; exit 126 ;;
build) shift; echo "BUILD $*"; exit 0 ;;
esac
exit 125
SH
chmod +x fake/podman
PATH=$TMP/fake:$PATH "$TR_ROOT/containers/build.sh" podman $BASE -f containers/Dockerfile.cpu -t x . >c1.out 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q '^BUILD --isolation chroot -f containers/Dockerfile.cpu -t x \.$' c1.out &&
    grep -q "^build: podman cannot run a container here (Error: crun: setrlimit .*): building with --isolation chroot" c1.out &&
    ok "build.sh: podman that cannot run containers builds with --isolation chroot, and says why" || fail "build.sh chroot" "exit $rc: $(cat c1.out)"
RUN_OK=1 PATH=$TMP/fake:$PATH "$TR_ROOT/containers/build.sh" podman $BASE -f containers/Dockerfile.cpu -t x . >c2.out 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q '^BUILD -f containers/Dockerfile.cpu -t x \.$' c2.out && ! grep -q isolation c2.out &&
    ok "build.sh: podman that runs containers: the build as given" || fail "build.sh plain" "exit $rc: $(cat c2.out)"
PATH=$TMP/fake:$PATH "$TR_ROOT/containers/build.sh" podman $BASE --isolation oci -f containers/Dockerfile.cpu -t x . >c3.out 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q '^BUILD --isolation oci -f ' c3.out && ! grep -q chroot c3.out &&
    ok "build.sh: an --isolation given is kept" || fail "build.sh --isolation given" "exit $rc: $(cat c3.out)"
done_testing
