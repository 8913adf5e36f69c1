#!/usr/bin/env bash
# t7003: make bundle carries Open MPI and PMIx, so multi-process runs work from the
# bundle on a node that has neither installed (issue 14). The bundle is made here,
# moved to another folder, and used in a private mount namespace where every file and
# folder of openmpi-bin, libopenmpi3, openmpi-common, libopenmpi-dev, libpmix2 and
# libpmix-dev is masked (/dev/null over files, an empty tmpfs over folders only they
# own); the system's mpirun must fail there first, so nothing passes by accident:
# - ldd of bin/terarec-worker and of every carried component resolves nothing from
#   the masked paths and finds every library;
# - bin/mpirun (by absolute path, from another working directory) runs 2 ranks whose
#   10 losses and final weights equal a 1-worker run's from the same bundle;
# - every object mpirun and the ranks load (LD_DEBUG=files) comes from the bundle or
#   the C runtime: Open MPI's components from its lib/openmpi3, PMIx's from lib/pmix;
#   ompi_info from the bundle puts every Open MPI path there, also after env.sh;
# - terarec train --workers 2 from the bundle (the launcher takes the bundle's
#   bin/mpirun beside itself) completes a run with its loader and checkpoint store;
# - bad input: a missing binary is one error line and exit 2; BUNDLE_MPI=0 carries
#   no Open MPI.
# Needs root (mount namespaces), patchelf, unshare, dpkg and Open MPI with its
# programs; skips otherwise.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
cd "$TMP" || exit 1
BUNDLE=$TR_ROOT/tools/bundle.sh
PKGS="openmpi-bin libopenmpi3 openmpi-common libopenmpi-dev libpmix2 libpmix-dev"
NAMES=("bad input: a missing binary" "BUNDLE_MPI=0" "bundle.sh carries Open MPI and PMIx"
       "the node: the system's mpirun fails" "the node: ldd resolves nothing masked"
       "the node: 2 ranks from bin/mpirun equal 1 worker" "the node: everything loads from the bundle"
       "the node: ompi_info paths inside the bundle" "the node: terarec train --workers 2 from the bundle")
skip_all() { # REASON
    local n
    for n in "${NAMES[@]}"; do skip "$n" "$1"; done
    done_testing
}
command -v patchelf >/dev/null || skip_all "patchelf is not installed (make deps installs it)"
ldd "$W" 2>/dev/null | grep -q 'libmpi\.so' || skip_all "terarec-worker does not link libmpi (MPI=0 build)"
{ command -v ompi_info && command -v orterun; } >/dev/null || skip_all "Open MPI's programs are not installed (openmpi-bin)"
command -v unshare >/dev/null || skip_all "unshare is not installed (util-linux)"
command -v dpkg >/dev/null || skip_all "dpkg is not installed (the masked node is made from Debian's package lists)"
unshare -m --propagation private true 2>/dev/null || skip_all "cannot make a mount namespace (needs root with CAP_SYS_ADMIN)"
use_mpi
M="--batch_size 512 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 16 --bottom_mlp_dims 32,16
   --top_mlp_dims 64,32,1 --learning_rate 0.5 --warmup_steps 0 --synthetic_dataset_valid_batches 4 --threads 1
   --max_steps 10 --backend cpu --print_freq 1"

# ---- bad input ------------------------------------------------------------------------------
out=$("$BUNDLE" "$TMP/bad" "$W" "$TMP/no-such-worker" 2>&1); rc=$?
if [ $rc -eq 2 ] && [ "$out" = "bundle: $TMP/no-such-worker: no such file" ] && [ -z "$(ls -d "$TMP"/bad* 2>/dev/null)" ]; then
    ok "bad input: a missing binary: exit 2, one line naming it, nothing written"
else
    fail "bad input: a missing binary" "rc $rc: $out"
fi
out=$(BUNDLE_MPI=0 BUNDLE_CUDA=0 "$BUNDLE" "$TMP/nompi" "$W" 2>&1); rc=$?
if [ $rc -eq 0 ] && ls "$TMP"/nompi/lib/libmpi.so.* >/dev/null 2>&1 && [ ! -e "$TMP/nompi/bin/mpirun" ] &&
    [ ! -e "$TMP/nompi/env.sh" ] && [ -z "$(ls -d "$TMP"/nompi/lib/openmpi* "$TMP"/nompi/lib/pmix 2>/dev/null)" ]; then
    ok "BUNDLE_MPI=0: libmpi but no mpirun, components or env.sh ($out)"
else
    fail "BUNDLE_MPI=0" "rc $rc: $out; $(ls "$TMP/nompi/bin" "$TMP/nompi/lib" 2>&1 | tr '\n' ' ')"
fi
rm -rf "$TMP/nompi"

# ---- the bundle, moved ----------------------------------------------------------------------
# BUNDLE_CUDA=0: the CUDA toolkit's libraries are not what this test is about
t0=$(date +%s.%N)
out=$(BUNDLE_CUDA=0 "$BUNDLE" "$TMP/bundle" "$W" "$TR_BIN/terarec" "$TR_BIN/terarec-loader" "$TR_BIN/terarec-ckpt" 2>&1); rc=$?
t1=$(date +%s.%N)
B=$TMP/elsewhere/tr-bundle
mkdir -p "$TMP/elsewhere"
[ $rc -eq 0 ] && mv "$TMP/bundle" "$B"
ncomp=$(ls "$B"/lib/openmpi3/mca_*.so 2>/dev/null | wc -l)
npmix=$(ls "$B"/lib/pmix/pmix_mca_*.so 2>/dev/null | wc -l)
if [ $rc -eq 0 ] && [ -x "$B/bin/mpirun" ] && [ -x "$B/bin/orted" ] && [ -x "$B/libexec/openmpi/orterun" ] &&
    [ -f "$B/env.sh" ] && [ "$ncomp" -gt 50 ] && [ "$npmix" -gt 0 ] && [ -f "$B/share/openmpi/help-orterun.txt" ] &&
    [ -f "$B/etc/openmpi/openmpi-mca-params.conf" ] && ls "$B"/share/pmix/help-*.txt >/dev/null 2>&1 &&
    grep -q '^libexec/openmpi/orted <- ' "$B/MANIFEST" && grep -q '^lib/pmix/pmix_mca_.* <- ' "$B/MANIFEST"; then
    ok "bundle.sh carries Open MPI and PMIx: $ncomp + $npmix components, help texts, parameter files ($(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s: ${out#bundle: })"
else
    fail "bundle.sh carries Open MPI and PMIx" "rc $rc: $out; $ncomp Open MPI and $npmix PMIx components"
    for n in "${NAMES[@]:3}"; do skip "$n" "no bundle"; done
    done_testing
fi

# ---- on a node without Open MPI and PMIx ------------------------------------------------------
# node.sh runs in the namespace: masks the packages, then writes each step's output
# and status to ns/NAME.out and ns/NAME.rc; a step that must not run is absent
mkdir -p ns ld r1 r2
cat > node.sh <<'EOF'
set -u
TMP=$1 B=$2 W=$3 PKGS=$4 M=$5
cd "$TMP/ns"
step() { # NAME CMD...: also its seconds into times
    local name=$1 t=$EPOCHREALTIME; shift
    "$@" >"$TMP/ns/$name.out" 2>&1; echo $? >"$TMP/ns/$name.rc"
    echo "$name $(awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $t}")" >>"$TMP/ns/times"
}
t=$EPOCHREALTIME
# every path of the packages; folders that no other package lists get a tmpfs, the
# files outside them /dev/null (symlinks point at one of these)
inst=""
for p in $PKGS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' && inst+=" $p"; done
for p in $inst; do dpkg -L "$p"; done | sort -u >ours.list
ls /var/lib/dpkg/info/*.list | grep -vE "/($(echo $inst | tr ' ' '|'))(:[a-z0-9]+)?\.list$" | xargs cat | sort -u >others.list
comm -23 ours.list others.list | while read -r f; do if [ -d "$f" ] && [ ! -L "$f" ]; then echo "$f"; fi; done |
    awk '{ if (prev != "" && index($0, prev "/") == 1) next; print; prev = $0 }' >dirs.list
awk 'NR == FNR { d[++n] = $0; next } { for (i = 1; i <= n; i++) if (index($0, d[i] "/") == 1) next; print }' \
    dirs.list ours.list | while read -r f; do
    if [ -f "$f" ] && [ ! -L "$f" ]; then mount --bind /dev/null "$f" && echo "$f"; fi
done >files.list
while read -r d; do mount -t tmpfs -o size=1m,mode=755 none "$d" || exit 1; done <dirs.list
echo "mask $(awk "BEGIN{printf \"%.1f\", $EPOCHREALTIME - $t}")" >>"$TMP/ns/times"
# the system's mpirun must not work here; nothing else runs if it does
step sysmpirun mpirun --allow-run-as-root -np 1 true
[ "$(cat sysmpirun.rc)" != 0 ] || exit 0
step ldd ldd "$B"/bin/terarec-worker "$B"/libexec/openmpi/* "$B"/lib/openmpi3/*.so "$B"/lib/pmix/*.so
step r1 "$B/bin/terarec-worker" $M --log_path "$TMP/r1/log.json" --dump_weights "$TMP/r1"
# by absolute path from another working directory, as terarec train will run it;
# the bottom MLP data-parallel, so that every rank's dense weights equal the
# reference's (table-wise it would live on rank 0 only)
cd /
step_ld() { LD_DEBUG=files LD_DEBUG_OUTPUT="$TMP/ld/ld" "$@"; }
step r2 step_ld timeout 120 "$B/bin/mpirun" -np 2 --oversubscribe --allow-run-as-root --bind-to none \
    "$B/bin/terarec-worker" $M --data_parallel_bottom_mlp --log_path "$TMP/r2/log.json" --dump_weights "$TMP/r2"
cd "$TMP/ns"
step paths "$B/bin/ompi_info" --path all --parsable
step envsh bash -c '. "$1/env.sh" && command -v mpirun && ompi_info --path all --parsable' _ "$B"
# the launcher with its loader and store, as users start a run
mkdir -p "$TMP/tr" && cd "$TMP/tr"
step train timeout 180 "$B/bin/terarec" train --workers 2 --db "$TMP/tr/runs.db" $M --data_parallel_bottom_mlp
EOF
t0=$(date +%s.%N)
unshare -m --propagation private bash node.sh "$TMP" "$B" "$W" "$PKGS" "$M" >ns/node.log 2>&1
t1=$(date +%s.%N)
nmask=$(( $(wc -l <ns/dirs.list) + $(wc -l <ns/files.list) ))
src() { cat "ns/$1.rc" 2>/dev/null || echo "did not run"; }
if [ "$(src sysmpirun)" != "did not run" ] && [ "$(src sysmpirun)" != 0 ] && [ "$nmask" -gt 20 ]; then
    ok "the node: the system's mpirun fails (exit $(src sysmpirun): $(head -n 1 ns/sysmpirun.out)) with $nmask paths masked"
else
    fail "the node: the system's mpirun fails" "exit $(src sysmpirun), $nmask paths masked: $(tail -n 3 ns/node.log ns/sysmpirun.out 2>/dev/null)"
fi

# ldd: no "not found", nothing under a masked folder or a masked file
if [ "$(src ldd)" = 0 ]; then
    nldd=$(grep -c '^/.*:$' ns/ldd.out)
    bad=$(awk '$2 == "=>" {print $1, $3}' ns/ldd.out | sort -u | while read -r name path; do
        [ "$path" = not ] && { echo "$name not found"; continue; }
        p=$(readlink -f "$path")
        if grep -qxF -e "$path" -e "$p" ns/files.list; then echo "$name => $path"; continue; fi
        while read -r d; do case "$p/" in "$d"/*) echo "$name => $path"; break ;; esac; done <ns/dirs.list
    done)
    # and the worker's own: every library that is not the C runtime from the bundle
    outside=$(sed -n "\|^$B/bin/terarec-worker:\$|,\|^/.*:\$|p" ns/ldd.out | awk '$2 == "=>" {print $1, $3}' |
        grep -vE '^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl\.|librt\.|libresolv|libutil|libgcc_s|libstdc\+\+|libcuda\.|libnvidia-)' |
        grep -vE '^(libcudart|libcublas|libcublasLt|libnccl)\.' | grep -vE " $B/(bin/\.\./)?lib/" || true)
    nworker=$(sed -n "\|^$B/bin/terarec-worker:\$|,\|^/.*:\$|p" ns/ldd.out | grep -c " => $B/bin/\.\./lib/")
    if [ -z "$bad" ] && [ -z "$outside" ] && [ "$nworker" -gt 20 ] && [ "$nldd" -gt 50 ]; then
        ok "the node: ldd resolves nothing masked: the worker ($nworker libraries from the bundle), orterun/orted/ompi_info and $((nldd - 4)) components"
    else
        fail "the node: ldd resolves nothing masked" "$nworker from the bundle; $(echo "$bad $outside" | head -n 8)"
    fi
else
    fail "the node: ldd resolves nothing masked" "ldd: $(src ldd): $(tail -n 3 ns/ldd.out)"
fi

# two ranks from the bundle's mpirun train the same model as one worker
if [ "$(src r1)" = 0 ] && [ "$(src r2)" = 0 ] && grep -q "2 worker(s)" ns/r2.out && [ -f r2/rank1.bin ] &&
    cmp=$(python3 "$TR_ROOT/tests/integration/compare_runs.py" --wtol 1e-4 r1 r2 2>&1); then
    l1=$(sed -n 's/^step=10,.* loss=\([0-9.]*\).*/\1/p' ns/r1.out) l2=$(sed -n 's/^step=10,.* loss=\([0-9.]*\).*/\1/p' ns/r2.out)
    ok "the node: 2 ranks from bin/mpirun equal 1 worker (step 10 loss $l2 vs $l1; $(echo "$cmp" | tail -n 1))"
else
    fail "the node: 2 ranks from bin/mpirun equal 1 worker" \
        "r1 $(src r1), r2 $(src r2): $(tail -n 5 ns/r2.out 2>/dev/null; echo "${cmp:-}" | grep -v '^ok' | tail -n 4)"
fi

# what mpirun (orterun) and the ranks loaded: the bundle's objects, or the C runtime
# (and bash's libtinfo, for the bin/mpirun script), or the RDMA stack bundle.sh leaves
# to the node (Debian's Open MPI parameters turn its components off: none expected)
if [ "$(src r2)" = 0 ] && ls ld/ld.* >/dev/null 2>&1; then
    loaded=$(cat ld/ld.* | sed -n 's/.*calling init: \([^ ]*\).*/\1/p' | sort -u)
    foreign=$(echo "$loaded" | grep -v "^$B/" |
        grep -vE '/(ld-linux[^/]*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libgcc_s|libstdc\+\+|libtinfo)\.so[^/]*$' |
        grep -vE '/(libibverbs|librdmacm|libefa|libmlx[45]|libfabric|libucp|libuct|libucs|libucm)\.so[^/]*$' || true)
    # per process: the ranks (they load terarec-worker's libraries) and orterun
    ranks=0 rank_comp=1
    for f in ld/ld.*; do
        grep -qE "calling init: $B/(bin/\.\./)?lib/libmpi\.so" "$f" || continue
        ranks=$((ranks + 1))
        grep -q "calling init: $B/lib/openmpi3/mca_btl_vader\.so" "$f" &&
            grep -q "calling init: $B/lib/pmix/pmix_mca_" "$f" || rank_comp=0
    done
    norte=$(grep -l "calling init: $B/lib/openmpi3/mca_plm_" ld/ld.* | wc -l)
    nmca=$(echo "$loaded" | grep -c "^$B/lib/openmpi3/mca_.*\.so$")
    npmx=$(echo "$loaded" | grep -c "^$B/lib/pmix/pmix_mca_.*\.so$")
    if [ -z "$foreign" ] && [ "$ranks" -eq 2 ] && [ "$rank_comp" -eq 1 ] && [ "$norte" -ge 1 ]; then
        ok "the node: everything loads from the bundle ($nmca Open MPI and $npmx PMIx components, in orterun and both ranks)"
    else
        fail "the node: everything loads from the bundle" \
            "ranks $ranks (components from the bundle: $rank_comp), orterun $norte; outside: $(echo "$foreign" | head -n 6 | tr '\n' ' ')"
    fi
else
    fail "the node: everything loads from the bundle" "no 2-rank run (r2: $(src r2))"
fi

# ompi_info from the bundle: Open MPI's paths in the bundle (bin/ompi_info, and after
# sourcing env.sh, which also puts bin/ first in PATH)
paths_ok() { # FILE
    local k v bad=""
    for k in prefix bindir libdir pkglibdir pkgdatadir sysconfdir datadir; do
        v=$(sed -n "s/^path:$k://p" "$1" | head -n 1)
        case "$v" in "$B"|"$B"/*) ;; *) bad+=" $k=$v" ;; esac
    done
    [ -z "$bad" ] || { echo "$bad"; return 1; }
}
if [ "$(src paths)" = 0 ] && pb=$(paths_ok ns/paths.out) && [ "$(src envsh)" = 0 ] &&
    [ "$(head -n 1 ns/envsh.out)" = "$B/bin/mpirun" ] && pe=$(paths_ok ns/envsh.out); then
    ok "the node: ompi_info paths inside the bundle (pkglibdir $(sed -n 's/^path:pkglibdir://p' ns/paths.out | head -n 1 | sed "s|^$TMP|\$TMP|"), also after env.sh)"
else
    fail "the node: ompi_info paths inside the bundle" "paths $(src paths):${pb:-} env.sh $(src envsh):${pe:-} $(head -n 1 ns/envsh.out 2>/dev/null)"
fi
if [ "$(src train)" = 0 ] && grep -q "^terarec: run .* completed" ns/train.out &&
    grep -q "^workers: .*$B/bin/mpirun" <("$B/bin/terarec" train --workers 2 --dry_run $M 2>&1); then
    ok "the node: terarec train --workers 2 from the bundle: $(grep -m1 '^terarec: run' ns/train.out) (through its bin/mpirun)"
else
    fail "the node: terarec train --workers 2 from the bundle" "exit $(src train): $(tail -n 6 ns/train.out 2>/dev/null)"
fi
echo "# the node's steps took $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s: $(tr '\n' ' ' <ns/times 2>/dev/null)"
done_testing
