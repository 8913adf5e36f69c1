#!/usr/bin/env bash
# t5001: under a real SLURM cluster (slurm/local_cluster.sh: munged, slurmctld and two
# slurmd in network namespaces on this machine), 'srun --mpi=pmix -N 2' trains the same
# model as one local worker, column-wise (-n 4) and table-wise (2 tasks per node), with
# the tasks really spread over both nodes; a rank whose MPI_Init ends 2 s after the
# other node's does not crash; a stopped rank and a rank failing before MPI end the
# step; workers sharing a GPU on one node (by UUID) stop all ranks under --comm nccl;
# tasks started without PMIx (srun --mpi=none) refuse to train alone; the seed's cmd=
# example of slurm_multinode.sh trains through terarec train and is in the run history;
# then the cluster is stopped (also when the test is interrupted) and nothing it
# started is left. SKIPs without root, namespaces or the SLURM/munge commands (make deps
# installs them); under CI=true a SKIP is a failure.
# run.sh: holds slurm (a SLURM cluster of its own: daemons on fixed ports, network namespaces)
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
SL=$TR_ROOT/slurm
CMP="python3 $TR_ROOT/tests/integration/compare_runs.py"
# a cluster of its own (dir, names, subnet, port), so that a cluster someone started with
# the defaults is left alone
CDIR=/var/spool/terarec-slurm-t5001
CTAG=trslt
cluster() { # SCRIPT ARGS...: runs slurm/SCRIPT on the test's cluster
    local s=$1; shift
    TR_SLURM_DIR=$CDIR TR_SLURM_TAG=$CTAG TR_SLURM_SUBNET=10.231.74 TR_SLURM_PORT=6927 \
        TR_SLURM_KILLWAIT=5 TR_SLURM_TIMEOUT=30 timeout -k 10 120 "$SL/$s" "$@"
}

why=""
[ "$(id -u)" -eq 0 ] || why="not root (the cluster needs namespaces, a bridge and daemons run as root)"
if [ -z "$why" ]; then
    for c in slurmctld:slurmctld slurmd:slurmd srun:slurm-client scontrol:slurm-client \
             munged:munge ip:iproute2 nsenter:util-linux unshare:util-linux flock:util-linux python3:python3; do
        command -v "${c%%:*}" >/dev/null 2>&1 || why="${why:+$why, }no ${c%%:*} (package ${c#*:})"
    done
    [ -n "$why" ] && why="$why; run 'make deps'"
fi
if [ -z "$why" ] && ! unshare --net --uts --mount true 2>/dev/null; then
    why="cannot create namespaces here (unprivileged container?)"
fi
if [ -z "$why" ] && ! ip netns list >/dev/null 2>&1; then why="'ip netns' does not work here"; fi
if [ -z "$why" ] && [ ! -x "$W" ]; then why="$W not built"; fi
if [ -z "$why" ] && ! "$W" --version --parsable | grep -qx 'mpi:yes'; then why="terarec-worker built without MPI"; fi
if [ -n "$why" ]; then
    if [ "${CI:-}" = true ]; then
        fail "slurm cluster test runs in CI" "$why"
    else
        skip "slurm cluster" "$why"
    fi
    done_testing
fi

# one run at a time on this machine (several people may run 'make test' at once): a second
# run would stop this one's cluster as a leftover
mkdir -p /run/lock && exec 9>/run/lock/terarec-t5001.lock
if ! flock -w 300 9; then
    fail "another t5001 run still holds /run/lock/terarec-t5001.lock after 300 s"
    done_testing
fi

# ALWAYS stop the cluster, also on an error or a signal; the normal path stops it below
stopped=0
on_exit() {
    [ $stopped = 1 ] || cluster local_cluster_stop.sh --purge >/dev/null 2>&1
    rm -rf "$TMP"
}
trap on_exit EXIT
trap 'exit 130' INT TERM
logs() { tail -n 6 "$CDIR"/log/*.log 2>/dev/null; }   # for failure messages
detail() { tail -n "${1:-10}" | sed '1!s/^/# /'; }       # fail adds '# ' to the first line

t0=$(date +%s)
# whatever an aborted earlier run left behind
cluster local_cluster_stop.sh --purge >/dev/null 2>&1
out=$(cluster local_cluster.sh 2 2>&1)
if [ "$(echo "$out" | tail -n 1)" = "cluster ready" ]; then
    ok "local_cluster.sh 2: cluster ready in $(($(date +%s) - t0)) s"
    up=1
else
    fail "local_cluster.sh 2: cluster ready" "$(echo "$out" | detail 20)"
    up=0
fi
# what it started, to check after the stop that none of it is left
started=()
for f in "$CDIR"/run/slurmctld.pid "$CDIR"/run/slurmd-*.pid "$CDIR"/run/munged.pid; do
    [ -s "$f" ] && started+=("$(cat "$f"):$(basename "$f" .pid)")
done

if [ $up = 1 ]; then
    export SLURM_CONF=$CDIR/etc/slurm.conf
    # the emulated nodes talk over their eth0 (like real ones); 4 tasks share 2 cores, so
    # MPI must yield instead of spinning (mpirun does this itself when oversubscribed)
    export OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_mpi_yield_when_idle=1
    F="--batch_size 250 --synthetic_dataset_cardinalities 30,7,50,7,1000,3,200,90,5,64 --embedding_dim 8
       --bottom_mlp_dims 16,8 --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --max_steps 20
       --print_freq 1 --synthetic_dataset_valid_batches 2 --synthetic_dataset_train_batches 50"

    hosts=$(timeout -k 5 30 srun -N 2 hostname 2>&1 | sort -u)
    if [ "$(echo "$hosts" | wc -l)" -eq 2 ] && [ "$(echo "$hosts" | grep -c '^trnode[12]$')" -eq 2 ]; then
        ok "srun -N 2 hostname: two nodes ($(echo $hosts))"
    else
        fail "srun -N 2 hostname: two nodes" "$( (echo "$hosts"; logs) | detail 30)"
    fi

    mkdir -p "$TMP/ref"
    if out=$($W $F --log_path "$TMP/ref/log.json" --dump_weights "$TMP/ref" 2>&1); then
        ok "reference run, one local worker"
    else
        fail "reference run, one local worker" "$(echo "$out" | detail)"
    fi

    # srun_train NAME CMPOPTS SRUNOPTS... -- WORKEROPTS...: trains into $TMP/NAME under srun
    # (each task first writes its node's name to NAME/host.<rank>) and compares with ref
    srun_train() {
        local name=$1 cmpopts=$2 sopts=() d=$TMP/$1 out
        shift 2
        while [ "$1" != -- ]; do sopts+=("$1"); shift; done
        shift
        mkdir -p "$d"
        # In an ASan build, LeakSanitizer reports memory that Open MPI and PMIx never free
        # (libpmix, unloaded MCA components) and fails every rank; the leak check is left to
        # the single-process runs, here and in the other tests.
        # shellcheck disable=SC2016
        if ! out=$(ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout -k 10 90 srun --mpi=pmix "${sopts[@]}" \
                sh -c 'hostname >"$0/host.$PMIX_RANK" && exec "$@"' "$d" \
                "$W" $F "$@" --log_path "$d/log.json" --dump_weights "$d" 2>&1); then
            fail "$name: srun --mpi=pmix ${sopts[*]} trains" "$( (echo "$out" | tail -n 10; logs) | detail 40)"
            return
        fi
        local nh
        nh=$(cat "$d"/host.* 2>/dev/null | sort -u | wc -l)
        if [ "$(ls "$d"/host.* 2>/dev/null | wc -l)" -eq 4 ] && [ "$nh" -eq 2 ]; then
            ok "$name: the 4 ranks ran on 2 nodes ($(for r in 0 1 2 3; do printf '%s ' "$r:$(cat "$d/host.$r")"; done))"
        else
            fail "$name: the 4 ranks ran on 2 nodes" "$(grep . "$d"/host.* | tr '\n' ' ')"
        fi
        # shellcheck disable=SC2086
        if out=$($CMP $cmpopts "$TMP/ref" "$d" 2>&1); then
            ok "$name: equals the one-worker run ($(echo "$out" | tail -n 1))"
        else
            fail "$name: equals the one-worker run" "$(echo "$out" | grep -v '^ok' | detail 8)"
        fi
    }
    srun_train colwise "" -N 2 -n 4 -- --columnwise_split --data_parallel_bottom_mlp
    # table-wise with the default model-parallel bottom MLP (rank 0 runs it): the other
    # ranks' bottom copies are unused, so only the top MLP, after the 16*16+16 + 16*8+8
    # bottom parameters, must be the same on every rank (as in t2002)
    srun_train tablewise "--mp-top0=408" -N 2 --ntasks-per-node=2 --

    # a rank late out of MPI_Init: rank 0 alone on the first node, ranks 1-3 on the
    # second; Open MPI's modex fence reaches rank 0 2 s late (pmix_slow_modex.so), and
    # the last fence of MPI_Init does not hold the other node's ranks under srun. Their
    # first message once met rank 0 before its receive callbacks were set: a segfault
    # of that rank (t5002 in CI; 2 jobs in about 1,400 by chance). The workers hold
    # every rank until all are out of MPI_Init, and train.
    P=$TR_BUILD/tests/lib/pmix_slow_modex.so
    if [ ! -f "$P" ]; then
        fail "srun: a rank late out of MPI_Init" "no $P (make builds it where libpmix-dev is installed)"
    else
        printf '%s\n' trnode1 trnode2 trnode2 trnode2 >"$TMP/late.hosts"
        # (ASan: the library comes before ASan's runtime in the list of libraries)
        out=$(ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:verify_asan_link_order=0" \
            SLURM_HOSTFILE="$TMP/late.hosts" LD_PRELOAD=$P TR_TEST_SLOW_MODEX_RANK=0 \
            timeout -k 5 60 srun --mpi=pmix -n 4 -m arbitrary "$W" $F --log_path= </dev/null 2>&1)
        rc=$?
        if [ $rc -eq 0 ] && echo "$out" | grep -q "pmix_slow_modex: rank 0: Open MPI's modex fence released 2000 ms late" &&
            echo "$out" | grep -q "^summary: steps=20,"; then
            ok "srun: rank 0 out of MPI_Init 2 s after the other node's ranks: no rank sends before, and the 4 train"
        else
            fail "srun: a rank late out of MPI_Init" "exit $rc: $(echo "$out" | grep -E 'pmix_slow|error|signal|srun|summary' | detail 10)"
        fi
    fi

    # a rank stopped by SIGSTOP on the second node: after --collective_timeout the
    # others name it and end the step (MPI_Abort through PMIx: slurmstepd kills
    # every task, the stopped one included)
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout -k 10 120 srun --mpi=pmix -N 2 -n 4 \
        "$W" $F --max_steps 1000000 --print_freq 1000000 --collective_timeout 5 --log_path= \
        </dev/null >"$TMP/stop.out" 2>&1 &
    job=$! victim=""
    for _ in $(seq 300); do
        sleep 0.1
        for p in $(own_pids "^$W .*--collective_timeout 5"); do
            [ "$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^PMIX_RANK=//p')" = 3 ] && victim=$p
        done
        [ -n "$victim" ] && grep -q '^model: ' "$TMP/stop.out" && break
    done
    if [ -z "$victim" ]; then
        fail "srun: SIGSTOP on rank 3" "rank 3 not found: $(tail -n 5 "$TMP/stop.out" | detail)"
        kill "$job" 2>/dev/null
        wait "$job"
    else
        sleep 1
        kill -STOP "$victim"
        t0=$(date +%s)
        wait "$job"
        rc=$? secs=$(($(date +%s) - t0))
        if [ $rc -ne 0 ] && [ $secs -le 30 ] &&
            grep -qE 'no progress for [0-9.]+ s \(--collective_timeout 5\); silent rank\(s\): 3 \(trnode' "$TMP/stop.out"; then
            ok "srun: rank 3 stopped: the step ends ${secs} s later naming rank 3 on its node (exit $rc)"
        else
            fail "srun: rank 3 stopped: the step ends naming it" "exit $rc after $secs s: $(grep -E 'error|srun' "$TMP/stop.out" | detail 10)"
        fi
        for _ in $(seq 100); do kill -0 "$victim" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$victim" 2>/dev/null; then
            fail "srun: the stopped rank is killed with the step" "pid $victim is still there"
            kill -KILL "$victim"
        else
            ok "srun: the stopped rank is killed with the step"
        fi
    fi

    # a rank that fails before the communicator exists (its backend does not open):
    # PMIx_Abort ends the step instead of leaving the other ranks in MPI_Init
    t0=$(date +%s)
    # shellcheck disable=SC2016
    out=$(ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout -k 10 60 srun --mpi=pmix -N 2 -n 4 \
        sh -c 'if [ "$PMIX_RANK" = 3 ]; then exec "$@" --backend cuda; else exec "$@"; fi' sh "$W" $F --log_path= \
        </dev/null 2>&1)
    rc=$? secs=$(($(date +%s) - t0))
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $secs -le 30 ] &&
        echo "$out" | grep -qE 'error: rank 3 of 4 failed \(not supported\): ending the job on every rank \(exit code 1\)'; then
        ok "srun: rank 3 fails before MPI is up: the step ends in ${secs} s with its message (exit $rc)"
    else
        fail "srun: rank 3 fails before MPI is up: the step ends" "exit $rc after $secs s: $(echo "$out" | grep -E 'error|srun' | detail 10)"
    fi

    # GPU sharing is a verdict of every node, shared through PMIx: the two workers of
    # the second node report one GPU (TR_TEST_DEVICE_ID stands in for its UUID), those
    # of the first a GPU each; under --comm nccl all four stop before training, the
    # second node's first rank naming its node and ranks, rank 0 saying another node
    # shares
    # shellcheck disable=SC2016
    out=$(ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout -k 10 60 srun --mpi=pmix -N 2 --ntasks-per-node=2 \
        sh -c 'if [ "$SLURM_NODEID" = 1 ]; then id=GPU-n1; else id=GPU-n0-$SLURM_LOCALID; fi
               TR_TEST_DEVICE_ID=$id exec "$@"' sh "$W" $F --comm nccl --log_path= </dev/null 2>&1)
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
        echo "$out" | grep -q "error: --comm nccl: the workers of another node share GPUs" &&
        echo "$out" | grep -q "error: --comm nccl: node 1 (.*) runs 2 workers on 1 GPU(s) (ranks 2 and 3 share GPU-n1)" &&
        ! echo "$out" | grep -qE "ending the job|step=1,"; then
        ok "srun: workers sharing a GPU on the second node: --comm nccl refused on all 4 ranks, naming node 1 and its ranks"
    else
        fail "srun: workers sharing a GPU on the second node refuse --comm nccl together" "exit $rc: $(echo "$out" | grep -E 'error|srun' | detail 10)"
    fi

    # tasks of one step started without PMIx (srun --mpi=none) each see a world of 1:
    # they refuse before training, naming the missing PMIx (issue 34)
    out=$(ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout -k 10 60 srun --mpi=none -N 2 -n 2 \
        "$W" $F --log_path= </dev/null 2>&1)
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] &&
        [ "$(echo "$out" | grep -cE "error: this is task [12] of 2 of SLURM step [0-9]+\.[0-9]+ but MPI sees a world of 1: the step was started without PMIx")" = 2 ] &&
        echo "$out" | grep -q "hint: srun --mpi=pmix (slurm_multinode.sh: srun_flags=--mpi=pmix)" &&
        ! echo "$out" | grep -qE "^(step=|model:)"; then
        ok "srun --mpi=none -n 2: both tasks refuse before training, naming the missing PMIx (exit $rc)"
    else
        fail "srun --mpi=none -n 2: the tasks refuse" "exit $rc: $(echo "$out" | grep -vE '^(step=|model:|data:)' | detail 10)"
    fi

    # any other cmd that runs terarec-worker: srun --mpi=pmix by default (one world of 2)
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" TR_BIN=$TR_BIN cmd="exec terarec-worker ${F//$'\n'/ } --log_path=" \
        timeout -k 10 120 sbatch --wait -N 2 -n 2 -o "$TMP/raw.out" "$SL/slurm_multinode.sh" >/dev/null 2>&1
    rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c '^Training run completed' "$TMP/raw.out")" = 1 ] &&
        grep -q "; 2 worker(s)" "$TMP/raw.out"; then
        ok "cmd='exec terarec-worker ...' (no srun_flags): srun --mpi=pmix, one job of 2 workers"
    else
        fail "cmd='exec terarec-worker ...' runs with PMIx" "exit $rc: $(tail -n 8 "$TMP/raw.out" | detail 8)"
    fi

    # slurm_multinode.sh's header example as written: the seed's cmd, no srun_flags; it
    # runs through terarec train (srun --mpi=pmix), and the run is in the history
    mkdir -p "$TMP/sm"
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" TR_DB=$TMP/sm/runs.db TR_BIN=$TR_BIN \
        cmd="python -u main.py $F --run_name sm" timeout -k 10 120 \
        sbatch --wait -N 2 -n 2 -o "$TMP/sm/job.out" "$SL/slurm_multinode.sh" >/dev/null 2>&1
    rc=$?
    row=$("$TR_BIN/terarec" runs list --db "$TMP/sm/runs.db" 2>&1 | grep -w sm)
    if [ $rc -eq 0 ] && grep -q "^slurm_multinode.sh: cmd runs as: terarec train " "$TMP/sm/job.out" &&
        echo "$row" | grep -q completed; then
        ok "cmd='python -u main.py ...' sbatch -N 2 -n 2 slurm_multinode.sh: trains, recorded ($(echo $row))"
    else
        fail "slurm_multinode.sh's example as written" "exit $rc: $row $(tail -n 12 "$TMP/sm/job.out" | detail 12)"
    fi
fi

# stop: every daemon it started is gone, and so are its namespaces and bridge
t1=$(date +%s)
if out=$(cluster local_cluster_stop.sh --purge 2>&1); then
    ok "local_cluster_stop.sh --purge in $(($(date +%s) - t1)) s"
else
    fail "local_cluster_stop.sh --purge" "$(echo "$out" | detail)"
fi
stopped=1
# (a munged it started is rightly left running when another cluster of these scripts,
# started meanwhile, uses it: the stop script then says "left munged (PID) running")
heir=$(echo "$out" | sed -n 's/.*left munged (\([0-9]*\)) running.*/\1/p')
left=()
for pc in "${started[@]}"; do
    pid=${pc%%:*} comm=${pc#*:} && comm=${comm%%-*}
    [ "$pid" = "$heir" ] && continue
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] && left+=("$pc")
done
# (slurmctld and two slurmd at least, unless the start failed; munged only if it was needed)
if [ ${#left[@]} -eq 0 ] && { [ $up = 0 ] || [ ${#started[@]} -ge 3 ]; }; then
    ok "no daemon it started is left (${started[*]})"
else
    fail "no daemon it started is left" "started: ${started[*]:-none}; still running: ${left[*]:-none}"
fi
ns=$(ip netns list 2>/dev/null | grep "^$CTAG-" | tr '\n' ' ')
links=$(ip -o link show 2>/dev/null | grep -o " ${CTAG}[^:@]*" | tr '\n' ' ')
if [ -z "$ns$links" ] && [ ! -e "$CDIR" ]; then
    ok "its namespaces, links and $CDIR are gone"
else
    fail "its namespaces, links and $CDIR are gone" "namespaces: ${ns:-none}; links: ${links:-none}; dir: $(ls -d "$CDIR" 2>/dev/null)"
fi
echo "# total $(($(date +%s) - t0)) s"
done_testing
