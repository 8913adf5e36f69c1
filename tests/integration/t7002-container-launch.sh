#!/usr/bin/env bash
# t7002: terarec train --container-image / --container-mounts.
# - bad container flags (a mount that is not SRC[:DST[:FLAGS]], a relative DST, a
#   missing SRC, an empty mount, --container-mounts without an image, a dataset
#   missing through the mounts) exit 2 with one error line naming the flag and no
#   run history written;
# - --container_runtime auto: the engine that answers (`docker info`, then `podman
#   info`; a docker whose daemon is down or hangs is passed over), said on the console;
#   neither answering is exit 2 naming both; podman without its init binary
#   (catatonit; init_path from CONTAINERS_CONF) drops --init with a warning and a hint;
# - --dry_run, here: each program under `docker run` (or `podman run` with
#   --container_runtime podman) with the user's mounts, the run's directory and its
#   store at their own paths, the host's network and IPC, the caller's uid, GPUs
#   only where the host has a device, and the programs at the image's paths; the
#   container's paths in the flags passed on;
# - --dry_run inside a (pretend) SLURM allocation: pyxis's --container-image and
#   --container-mounts on every srun step (stores, the loader pinned to this node,
#   the workers under --mpi=pmix); outside --dry_run, an srun without pyxis is
#   refused before anything starts; slurm_multinode.sh's cont= and mounts= become
#   the same flags;
# - a real run through the container path: the launcher on the host, the store, the
#   loader and two workers (mpirun in the image) in the image t7001 built, under a
#   docker stand-in (fake_docker.sh: a mount namespace chrooted into the image,
#   since no container engine can run here); it completes, the workers ran the
#   image's programs, the checkpoint lands in the host's store, and each container is
#   removed afterwards. SKIPs when t7001's image is absent.
# run.sh: holds podman (the image t7001 leaves, podman's storage)
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
cd "$TMP" || exit 1
mkdir -p data/ds hist
IMG=registry.example/terarec:test
MODEL="--batch_size 256 --embedding_dim 8 --bottom_mlp_dims 16,8 --top_mlp_dims 16,1 --learning_rate 0.5
   --warmup_steps 0 --threads 1"
M="$MODEL --synthetic_dataset_cardinalities 26x1000 --synthetic_dataset_valid_batches 2"

# ---- bad input ----------------------------------------------------------------------------------
# bad NAME PATTERN ARGS...: exit 2, exactly one error line matching PATTERN, no history
# file (ARGS come after the synthetic model's flags, $BAD_M: after $M)
bad() {
    local name=$1 pat=$2
    shift 2
    rm -rf hist && mkdir hist
    env ${BAD_ENV:-} $T train --db "$TMP/hist/runs.db" ${BAD_M:-$M} --max_steps 2 "$@" >bad.out 2>&1
    local rc=$?
    if [ $rc -eq 2 ] && [ "$(grep -c 'error:' bad.out)" = 1 ] && grep -q -- "$pat" bad.out && [ ! -e hist/runs.db ]; then
        ok "$name: exit 2, $(grep 'error:' bad.out | sed 's/.*error: //')"
    else
        fail "$name" "exit $rc: $(cat bad.out)"
    fi
}
bad "a mount with four fields" "not SRC\[:DST\[:FLAGS\]\]" --container-image $IMG --container-mounts "$TMP/data:/d:ro:x"
bad "a relative DST" "DST must be an absolute path" --container-image $IMG --container-mounts "$TMP/data:d"
bad "a relative SRC" "SRC must be an absolute path" --container-image $IMG --container-mounts "data:/d"
bad "a missing SRC" "$TMP/nothere: No such file" --container-image $IMG --container-mounts "$TMP/nothere:/d"
bad "an empty mount" "an empty mount" --container-image $IMG --container-mounts "$TMP/data:/d,,$TMP/data:/e"
bad "bad mount flags" "FLAGS are mount options" --container-image $IMG --container-mounts "$TMP/data:/d:ro++x"
bad "mounts without an image" "container-mounts needs --container-image" --container-mounts "$TMP/data:/d"
BAD_M=$MODEL bad "the dataset missing through the mounts" "/d/nope ($TMP/data/nope on this machine" \
    --container-image $IMG --container-mounts "$TMP/data:/d" --dataset_type split_binary --dataset_path /d/nope
bad "a relative checkpoint directory" "absolute path as the container sees it" \
    --container-image $IMG --checkpoint_dir ckpts
bad "an unknown runtime" "container_runtime" --container-image $IMG --container_runtime lxc
BAD_ENV=PATH=/nonexistent-bin bad "no docker nor podman" "neither docker nor podman" --container-image $IMG

# ---- --dry_run here -----------------------------------------------------------------------------
mkdir -p fakebin
ln -sf "$TR_ROOT/tests/integration/fake_docker.sh" fakebin/docker
rm -rf hist && mkdir hist
PATH=$TMP/fakebin:$PATH $T train --db "$TMP/hist/runs.db" $M --max_steps 2 --workers 2 --dry_run \
    --container-image $IMG --container-mounts "$TMP/data:/data:ro+rprivate" >dry.out 2>&1
rc=$?
store=$(sed -n 's/^store: //p' dry.out)
loader=$(sed -n 's/^loader: //p' dry.out)
workers=$(sed -n 's/^workers: //p' dry.out)
run_dir=$(printf '%s\n' "$workers" | sed -n 's/.*--log_path=\(.*\)\/dlrm_tf_log.json.*/\1/p')
[ $rc -eq 0 ] && [ -n "$store" ] && [ -n "$loader" ] && [ -n "$workers" ] && [ ! -e hist/runs.db ] &&
    [ ! -e "$run_dir" ] && ok "--dry_run: three commands, nothing created (no history, no run directory)" ||
    fail "--dry_run" "exit $rc: $(cat dry.out)"
all_ok=1
for line in "$store" "$loader" "$workers"; do
    case "$line" in
    "docker run --rm --init --name=terarec-"*) ;;
    *) all_ok=0 ;;
    esac
    for want in "--network=host" "--ipc=host" "--user=$(id -u):$(id -g)" "--workdir=$run_dir" \
        "-v $TMP/data:/data:ro,rprivate" "-v $run_dir:$run_dir" "-v $TMP/hist/checkpoints:$TMP/hist/checkpoints" \
        " $IMG " "/opt/terarec/bin/terarec-" "-e TR_ROOT"; do
        [[ $line == *"$want"* ]] || {
            all_ok=0
            echo "# missing '$want' in: $line"
        }
    done
done
[ $all_ok = 1 ] && ok "each program under docker run: mounts (ro,rprivate from pyxis's ro+rprivate), run dir, store, host network/IPC, uid, image paths" ||
    fail "docker run flags" "$(cat dry.out)"
[[ $workers == *" $IMG mpirun -np 2 "*"/opt/terarec/bin/terarec-worker "* ]] &&
    ok "two workers: mpirun inside the image" || fail "mpirun in the image" "$workers"
if [ -e /dev/nvidiactl ]; then
    [[ $workers == *"--gpus=all"* ]] && [[ $store != *"--gpus"* ]] && ok "GPUs handed to the workers' container only" ||
        fail "GPUs" "$workers"
else
    [[ $workers$store$loader != *"--gpus"* ]] && ok "no --gpus where the host has no GPU" || fail "no GPUs" "$workers"
fi
PATH=$TMP/fakebin:$PATH $T train --db "$TMP/hist/runs.db" $MODEL --max_steps 2 --dry_run --backend cpu \
    --container-image $IMG --container_runtime podman --container-mounts "$TMP/data:/data" \
    --dataset_type split_binary --dataset_path /data/ds >dryp.out 2>&1
[ $? -eq 0 ] && [ "$(grep -c '^[a-z]*: podman run ' dryp.out)" = 3 ] &&
    grep '^workers: ' dryp.out | grep -q -- '--dataset_path=/data/ds ' &&
    ok "--container_runtime podman; --dataset_path passed as the container sees it (checked on the host through the mount)" ||
    fail "podman dry run" "$(cat dryp.out)"

grep -q "^terarec: containers run with docker: docker answers" dry.out &&
    ok "--container_runtime auto: docker when 'docker info' answers, said on the console" || fail "docker picked" "$(cat dry.out)"

# ---- which engine: --container_runtime auto picks the one that answers; podman's init ------------
# fakes in rt/: docker whose daemon is down (or hangs: FAKE_DOCKER_HANG), podman that
# answers (or not: FAKE_PODMAN_DOWN); podman's init binary through CONTAINERS_CONF
mkdir -p rt
cat >rt/docker <<'SH'
#!/bin/sh
[ "$1" = info ] || exit 125
[ -n "${FAKE_DOCKER_HANG:-}" ] && sleep 30
echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2
exit 1
SH
cat >rt/podman <<'SH'
#!/bin/sh
[ "$1" = info ] && [ -z "${FAKE_PODMAN_DOWN:-}" ] && { echo "host:"; exit 0; }
echo "Error: cannot set up namespace using newuidmap" >&2
exit 125
SH
printf '#!/bin/sh\nexit 0\n' >rt/catatonit
chmod +x rt/docker rt/podman rt/catatonit
printf '[engine]\ninit_path = "%s"\n' "$TMP/rt/catatonit" >init_ok.conf
printf '[engine]\n# init_path = "/usr/bin/tini"\ninit_path = "%s"\n' "$TMP/rt/nothere" >init_gone.conf
: >init_unset.conf
# rt_dry OUT ENV...: a --dry_run with the auto runtime, the fakes first on PATH
rt_dry() {
    local out=$1
    shift
    rm -rf hist && mkdir hist
    env PATH="$TMP/rt:$PATH" "$@" $T train --db "$TMP/hist/runs.db" $M --max_steps 2 --dry_run \
        --container-image $IMG >"$out" 2>&1
}
rt_dry rt1.out CONTAINERS_CONF="$TMP/init_ok.conf"
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '^[a-z]*: podman run --rm --init ' rt1.out)" = 3 ] &&
    grep -q "^terarec: containers run with podman: podman answers ('podman info'); docker does not: 'docker info' exited 1: Cannot connect to the Docker daemon" rt1.out &&
    ! grep -q 'warn:' rt1.out &&
    ok "docker's daemon down, podman answers: podman, and the console says why" || fail "podman picked" "exit $rc: $(cat rt1.out)"
rt_dry rt2.out CONTAINERS_CONF="$TMP/init_ok.conf" FAKE_DOCKER_HANG=1 TR_CONTAINER_PROBE_TIMEOUT=1
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '^[a-z]*: podman run ' rt2.out)" = 3 ] &&
    grep -q "docker does not: 'docker info' did not answer within 1 s" rt2.out &&
    ok "a docker that hangs: given up after TR_CONTAINER_PROBE_TIMEOUT, podman" || fail "docker hangs" "exit $rc: $(cat rt2.out)"
BAD_ENV="PATH=$TMP/rt:$PATH FAKE_PODMAN_DOWN=1" bad "neither engine answers" \
    "neither docker nor podman answers (docker: 'docker info' exited 1: Cannot connect.*podman: 'podman info' exited 125: Error: cannot set up" \
    --container-image $IMG
rt_dry rt3.out CONTAINERS_CONF="$TMP/init_gone.conf"
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '^[a-z]*: podman run --rm --name=' rt3.out)" = 3 ] && ! grep '^[a-z]*: podman run ' rt3.out | grep -q -- ' --init ' &&
    grep -q "warn: podman's --init needs catatonit, which is missing: $TMP/rt/nothere (init_path in $TMP/init_gone.conf)" rt3.out &&
    grep -q "hint: install the Debian package catatonit" rt3.out &&
    ok "podman without its init binary: no --init, a warning naming catatonit and a hint" || fail "no catatonit" "exit $rc: $(cat rt3.out)"
rt_dry rt4.out CONTAINERS_CONF="$TMP/init_unset.conf"
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '^[a-z]*: podman run --rm --init ' rt4.out)" = 3 ] && ! grep -q 'catatonit' rt4.out &&
    ok "no init_path: catatonit found on PATH, --init kept" || fail "catatonit on PATH" "exit $rc: $(cat rt4.out)"
rm -rf hist && mkdir hist
PATH=$TMP/rt:$PATH CONTAINERS_CONF=$TMP/init_gone.conf $T train --db "$TMP/hist/runs.db" $M --max_steps 2 --dry_run \
    --container-image $IMG --container_runtime podman >rt5.out 2>&1
rc=$?
[ $rc -eq 0 ] && ! grep -q 'containers run with' rt5.out && grep -q "warn: podman's --init needs catatonit" rt5.out &&
    ok "--container_runtime podman: not probed, the init binary still checked" || fail "explicit podman" "exit $rc: $(cat rt5.out)"

# ---- under SLURM (the allocation's variables; --dry_run does not call srun) ---------------------
slurm_env() {
    env SLURM_JOB_ID=4242 SLURM_JOB_NODELIST='n[1-2]' SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=4 SLURMD_NODENAME=n1 "$@"
}
slurm_env $T train --db "$TMP/hist/runs.db" $M --max_steps 2 --dry_run --container-image "$IMG" \
    --container-mounts "$TMP/data:/data:ro" >drys.out 2>&1
rc=$?
s_store=$(sed -n 's/^store: //p' drys.out)
s_loader=$(sed -n 's/^loader: //p' drys.out)
s_workers=$(sed -n 's/^workers: //p' drys.out)
[ $rc -eq 0 ] && [[ $s_store == "srun --overlap "*"--nodes=2 --ntasks-per-node=1 "*"--container-image=$IMG --container-workdir=$TMP/hist/runs/"*" --container-mounts=$TMP/data:/data:ro,"*" /opt/terarec/bin/terarec-ckpt "* ]] &&
    ok "SLURM: a store per node, srun --container-image=IMAGE --container-workdir=RUN_DIR --container-mounts=..." || fail "SLURM store" "$(cat drys.out)"
[[ $s_loader == "srun --overlap "*"--nodes=1 --ntasks=1 --nodelist=n1 "*"--container-image=$IMG --container-workdir=$TMP/hist/runs/"*" --container-mounts=$TMP/data:/data:ro,"*" /opt/terarec/bin/terarec-loader "* ]] &&
    ok "SLURM: the loader in the image too, one task on this node (SLURMD_NODENAME)" || fail "SLURM loader" "$s_loader"
[[ $s_workers == "srun --mpi=pmix "*"--container-image=$IMG --container-workdir=$TMP/hist/runs/"*" --container-mounts=$TMP/data:/data:ro,"*" /opt/terarec/bin/terarec-worker "* ]] &&
    ok "SLURM: the workers' step, srun --mpi=pmix with pyxis's flags" || fail "SLURM workers" "$s_workers"
s_run=$(printf '%s\n' "$s_workers" | sed -n 's/.*--log_path=\(.*\)\/dlrm_tf_log.json.*/\1/p')
[[ $s_workers == *",$s_run:$s_run,$TMP/hist/checkpoints:$TMP/hist/checkpoints "* ]] &&
    ok "SLURM: the run directory and the store's directory mounted at their own paths" ||
    fail "SLURM run dir mount" "$s_workers"
grep -q 'warn: --container-image: this cluster.s srun has no --container-image' drys.out &&
    ok "--dry_run warns that this srun has no pyxis" || fail "pyxis warning" "$(cat drys.out)"
rm -rf hist && mkdir hist
slurm_env $T train --db "$TMP/hist/runs.db" $M --max_steps 2 --container-image "$IMG" >nopyxis.out 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q 'error: --container-image: this cluster.s srun has no --container-image' nopyxis.out &&
    [ ! -e hist/runs.db ] && ok "without pyxis: exit 2 before anything starts" ||
    fail "no pyxis" "exit $rc: $(cat nopyxis.out)"
slurm_env TR_BIN="$TR_BIN" cont="$IMG" mounts="$TMP/data:/data" bash "$TR_ROOT/slurm/slurm_multinode.sh" --db "$TMP/hist/runs.db" $M \
    --max_steps 2 --dry_run >sm.out 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c -- "--container-image=$IMG --container-workdir=[^ ]* --container-mounts=$TMP/data:/data," sm.out)" = 3 ] &&
    ok "slurm_multinode.sh cont= mounts=: terarec train --container-image --container-mounts" ||
    fail "slurm_multinode.sh cont" "exit $rc: $(cat sm.out)"

# ---- a real run through the container path ------------------------------------------------------
image_file=$TR_ROOT/build/containers/image-cpu
img=$(cat "$image_file" 2>/dev/null)
if [ "$(id -u)" != 0 ] || ! command -v buildah >/dev/null || ! command -v unshare >/dev/null; then
    skip "a run in the image" "needs root, buildah and unshare"
elif [ -z "$img" ] || ! podman image exists "$img" 2>/dev/null; then
    skip "a run in the image" "no image from t7001 ($image_file)"
else
    ctr=$(buildah from --pull-never "$img" 2>buildah.err) && rootfs=$(buildah mount "$ctr" 2>>buildah.err)
    if [ -z "${rootfs:-}" ]; then
        fail "mount the image's filesystem" "$(cat buildah.err)"
    else
        trap 'buildah umount "$ctr" >/dev/null 2>&1; buildah rm "$ctr" >/dev/null 2>&1; rm -rf "$TMP"' EXIT
        podman image inspect --format '{{range .Config.Env}}{{println .}}{{end}}' "$img" >image.env
        mkdir -p hist2 ds_host
        export FAKE_DOCKER_ROOTFS=$rootfs FAKE_DOCKER_IMAGE=$img FAKE_DOCKER_ENVFILE=$TMP/image.env \
            FAKE_DOCKER_LOG=$TMP/docker.log
        PATH=$TMP/fakebin:$PATH timeout 300 $T train --db "$TMP/hist2/runs.db" $M --max_steps 20 --workers 2 \
            --checkpoint_every 10 --name inimage --container-image "$img" \
            --container-mounts "$TMP/ds_host:/data" --hang_timeout 120 >run.out 2>&1
        rc=$?
        [ $rc -eq 0 ] && grep -q "run .* completed" run.out && ok "2 workers in the image: completed" ||
            fail "a run in the image" "exit $rc: $(tail -n 20 run.out; tail -n 20 hist2/runs/*/workers.log)"
        [ "$(grep -c '^docker run ' docker.log)" = 3 ] && ok "three containers started (store, loader, workers)" ||
            fail "docker calls" "$(cat docker.log)"
        wl=$(ls hist2/runs/*/workers.log 2>/dev/null | head -n 1)
        if [ ! -e /opt/terarec/bin/terarec-worker ] && grep -q "^terarec: attempt 0: .* $img mpirun .*/opt/terarec/bin/terarec-worker " "$wl"; then
            ok "the workers ran the image's /opt/terarec/bin/terarec-worker (absent on the host)"
        else
            fail "the image's worker" "$(head -n 5 "$wl")"
        fi
        # the store's own listing of the run's manifests (on the host, through its files)
        rid=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select id from runs where name='inimage'\").fetchone()[0])" "$TMP/hist2/runs.db" 2>/dev/null)
        steps=$($T ckpt list --checkpoint_dir "$TMP/hist2/checkpoints" --run_name "$rid" 2>&1)
        [[ $steps == *10* && $steps == *20* ]] && ok "checkpoints of steps 10 and 20 in the host's store" ||
            fail "checkpoints" "$steps"
        [ "$(grep -c '^docker rm --force terarec-' docker.log)" -ge 3 ] &&
            ok "each container removed after its program ended (docker rm --force)" || fail "removal" "$(cat docker.log)"
    fi
fi
done_testing
