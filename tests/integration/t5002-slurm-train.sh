#!/usr/bin/env bash
# t5002: `terarec train` under a real SLURM cluster (slurm/local_cluster.sh: munged,
# slurmctld and two slurmd in network namespaces on this machine), as users run it:
# - sbatch -N 2 -n 4 slurm/terarec.sbatch: the run row complete in SQLite (SLURM job id,
#   2 nodes, 4 ranks spread over both, metrics, the final checkpoint);
# - a USR1 mid-run (what --signal=B:USR1@120 sends): every rank checkpoints, the run is
#   recorded preempted, the job requeues itself, resumes and ends with the same weights,
#   bit for bit, as an uninterrupted run; the same for `scontrol requeue` (SIGTERM to
#   every process of the job, srun included, which kills its tasks: the attempt is
#   recorded preempted, and the requeued job continues the same row from the last
#   committed checkpoint);
# - kill -9 of the launcher in an allocation whose shell lives on: every program it
#   started ends within 10 s, and no checkpoint file is written after;
# - kill -9 of one worker on the second node: failed, naming the rank and the host,
#   within 10 s; with --max_restarts 1 the job resumes and completes;
# - a worker stopped with SIGSTOP: hung within --hang_timeout + 5 s, naming it;
# - slurm/slurm_multinode.sh with the seed's variables (cmd, srun_flags): a cmd that is the
#   worker and its flags runs as terarec train, in the run history.
# SKIPs without root, namespaces or the SLURM/munge commands; under CI=true a SKIP fails.
# run.sh: holds slurm (a SLURM cluster of its own: daemons on fixed ports, network namespaces)
# run.sh: alone (a checkpoint within SLURM's grace period after scontrol requeue: a
# second test's load made it miss, once)
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
SL=$TR_ROOT/slurm
CDIR=/var/spool/terarec-slurm-t5002
CTAG=trslu
cluster() {
    local s=$1; shift
    TR_SLURM_DIR=$CDIR TR_SLURM_TAG=$CTAG TR_SLURM_SUBNET=10.231.76 TR_SLURM_PORT=6929 \
        TR_SLURM_KILLWAIT=10 TR_SLURM_TIMEOUT=30 timeout -k 10 120 "$SL/$s" "$@"
}
why=""
[ "$(id -u)" -eq 0 ] || why="not root (the cluster needs namespaces, a bridge and daemons run as root)"
if [ -z "$why" ]; then
    for c in slurmctld:slurmctld slurmd:slurmd srun:slurm-client sbatch:slurm-client munged:munge ip:iproute2 \
             python3:python3; do
        command -v "${c%%:*}" >/dev/null 2>&1 || why="${why:+$why, }no ${c%%:*} (package ${c#*:})"
    done
    [ -n "$why" ] && why="$why; run 'make deps'"
fi
[ -z "$why" ] && ! unshare --net --uts --mount true 2>/dev/null && why="cannot create namespaces here"
[ -z "$why" ] && ! "$TR_BIN/terarec-worker" --version --parsable | grep -qx 'mpi:yes' && why="built without MPI"
if [ -n "$why" ]; then
    if [ "${CI:-}" = true ]; then fail "slurm train test runs in CI" "$why"; else skip "slurm train" "$why"; fi
    done_testing
fi
mkdir -p /run/lock && exec 9>/run/lock/terarec-t5002.lock
flock -w 300 9 || { fail "another t5002 holds its lock"; done_testing; }
on_exit() {
    cluster local_cluster_stop.sh --purge >/dev/null 2>&1
    rm -rf "$TMP"
}
trap on_exit EXIT
trap 'exit 130' INT TERM
cluster local_cluster_stop.sh --purge >/dev/null 2>&1
out=$(cluster local_cluster.sh 2 2>&1)
if [ "$(echo "$out" | tail -n 1)" != "cluster ready" ]; then
    fail "local_cluster.sh 2: cluster ready" "$(echo "$out" | tail -n 20)"
    done_testing
fi
ok "cluster of 2 nodes ready"
export SLURM_CONF=$CDIR/etc/slurm.conf
export OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_mpi_yield_when_idle=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export TR_BIN
cd "$TMP" || exit 1
DB=$TMP/hist/runs.db
F="--db $DB --batch_size 256 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --threads 1 --synthetic_dataset_valid_batches 2
   --columnwise_split --data_parallel_bottom_mlp --print_freq 10"
q() {
    python3 - "$DB" "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=30)
for r in c.execute(sys.argv[2]):
    print("|".join("" if v is None else str(v) for v in r))
PY
}
# poll QUERY (one value) every 50 ms in one python process, until TEST holds for it
# or SECS pass: a python started per poll takes seconds on a loaded machine, where a
# job of 600 steps passes the step it waits for and ends before the poll sees it
poll() { # SECS TEST QUERY ARGS...
    python3 - "$DB" "$@" <<'PY'
import sqlite3, sys, time
db, secs, test, query, args = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
end = time.monotonic() + secs
while True:
    v = None
    try:
        c = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=30)
        row = c.execute(query, args).fetchone()
        c.close()
        v = row[0] if row else None
    except sqlite3.Error:
        pass
    if v is not None and eval(test, {"v": v}):
        sys.exit(0)
    if time.monotonic() > end:
        sys.exit(1)
    time.sleep(0.05)
PY
}
wait_step() { # NAME STEP [SECS]
    poll "${3:-90}" "v >= $2" "select max(m.step) from metrics m join runs r on r.id = m.run where r.name = ?" "$1"
}
wait_status() { # NAME SECS: until the run's status is not running
    poll "$2" "v not in ('running', 'preempted')" "select status from runs where name = ?" "$1"
}
wait_job() { # JOBID SECS: until the job left the queue
    local i
    for i in $(seq 1 $(($2 * 10))); do
        [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
        sleep 0.1
    done
    return 1
}
# release JOBID: SLURM holds a requeued job back for 2 minutes (BeginTime: the
# lifetime of the old job's credential); once it is pending again, make it eligible
# a few seconds later (a start in the second the old credential was revoked is
# refused: "Job credential revoked")
release() {
    local i
    for i in $(seq 1 600); do
        if [ "$(squeue -h -j "$1" -o %T 2>/dev/null)" = PENDING ]; then
            sleep 3
            scontrol update JobId="$1" StartTime=now >/dev/null 2>&1
            return 0
        fi
        sleep 0.1
    done
    return 1
}
# what a failure reports of a job: its errors (the launcher copies the workers' log
# tail into the job's output), its last lines and, of a rank that crashed, the stack
# Open MPI's handler printed (in the run's workers.log)
job_tail() {
    grep -E "error|warn|hint|exited|signal" "$TMP/$1.out" | tail -n 16; echo "# ..."; tail -n 4 "$TMP/$1.out"
    sed -n 's/.*; logs in \(.*\)$/\1/p' "$TMP/$1.out" | while read -r d; do
        grep -hE -A 30 "Process received signal" "$d/workers.log" 2>/dev/null | head -n 30
    done
}
sb() { sbatch --parsable -o "$TMP/%j.out" "$@" | cut -d';' -f1; }
rank_proc() { q "select p.pid || ' ' || p.host from processes p join runs r on r.id = p.run where r.name = '$1'
                 and p.rank = $2 order by p.attempt desc limit 1"; }

# ---- sbatch end to end ----------------------------------------------------------------------------
mkdir -p full pre
job=$(sb --wait -N 2 -n 4 "$SL/terarec.sbatch" $F --max_steps 600 --checkpoint_every 200 --name full \
      --dump_weights "$TMP/full")
row=$(q "select status, nodes, workers, slurm_job_id = '$job', hosts from runs where name = 'full'")
[ "$row" = "completed|2|4|1|trnode[1-2]" ] && ok "sbatch -N 2 -n 4 terarec.sbatch: $row" ||
    fail "sbatch end to end" "$row $(job_tail "$job")"
[ "$(q "select count(*), count(distinct host) from processes p join runs r on r.id = p.run where r.name = 'full'
       and exit_code = 0")" = "4|2" ] && ok "4 ranks on 2 nodes, each ended with exit 0" ||
    fail "processes" "$(q 'select * from processes')"
[ "$(q "select count(*) from metrics m join runs r on r.id = m.run where r.name = 'full' and m.name = 'loss'")" = 60 ] &&
    [ "$(q "select group_concat(step) from checkpoints c join runs r on r.id = c.run where r.name = 'full'")" = \
      "200,400,600" ] && ok "60 loss rows and checkpoints at 200, 400, 600" ||
    fail "metrics and checkpoints" "$(q "select step from checkpoints")"

# ---- USR1 mid-run: checkpoint, requeue, resume, same weights ------------------------------------------
job=$(sb -N 2 -n 4 "$SL/terarec.sbatch" $F --max_steps 600 --checkpoint_every 200 --name pre \
      --dump_weights "$TMP/pre")
if wait_step pre 100 120; then
    scancel -s USR1 -b "$job"
    release "$job"
    if wait_status pre 120 && wait_job "$job" 60; then
        row=$(q "select status, restarts from runs where name = 'pre'")
        ev=$(q "select group_concat(kind) from events e join runs r on r.id = e.run where r.name = 'pre'")
        echo "$ev" | grep -q 'preempt_signal,preempted,requeue,requeued,restarted.*completed' && [ "$row" = "completed|1" ] &&
            ok "USR1: checkpointed, preempted, requeued and resumed ($ev)" || fail "USR1 requeue" "$row; $ev"
        same=1
        for r in 0 1 2 3; do cmp -s "full/rank$r.bin" "pre/rank$r.bin" || same=0; done
        [ $same = 1 ] && ok "the requeued run ends with the uninterrupted run's weights, bit for bit" ||
            fail "same weights after requeue" "$(ls -l full pre)"
    else
        fail "USR1: the job did not complete" "$(q "select status, reason from runs where name = 'pre'") $(job_tail "$job")"
        scancel "$job"
    fi
else
    fail "USR1: no progress" "$(job_tail "$job")"
    scancel "$job"
fi

# ---- scontrol requeue mid-run: SLURM's SIGTERM reaches every process of the job -------------------
# srun answers it by killing its tasks at once ("forcing job termination"), so the
# workers' save at the signal may or may not go through: the attempt is recorded
# preempted either way (never failed), and the requeued job continues its row from
# the last committed checkpoint (never step 0)
mkdir -p rq
job=$(sb -N 2 -n 4 "$SL/terarec.sbatch" $F --max_steps 600 --checkpoint_every 50 --name rq --dump_weights "$TMP/rq")
if poll 120 "v >= 100" "select max(c.step) from checkpoints c join runs r on r.id = c.run where r.name = ?" rq; then
    saved=$(q "select max(step) from checkpoints c join runs r on r.id = c.run where r.name = 'rq'")
    scontrol requeue "$job"
    release "$job"
    if wait_status rq 120 && wait_job "$job" 60; then
        row=$(q "select status, restarts from runs where name = 'rq'")
        ev=$(q "select group_concat(kind) from events e join runs r on r.id = e.run where r.name = 'rq'")
        from=$(q "select json_extract(e.data, '$.from_step') from events e join runs r on r.id = e.run
                  where r.name = 'rq' and e.kind = 'restarted'")
        first=$(q "select min(m.step) from metrics m join runs r on r.id = m.run where r.name = 'rq' and m.name = 'loss'
                   and m.time > (select min(time) from events e where e.run = r.id and e.kind = 'requeued')")
        echo "$ev" | grep -q 'preempt_signal,preempted,requeued,restarted.*completed' && [ "$row" = "completed|1" ] &&
            [ -n "$from" ] && [ "$from" -ge "$saved" ] && [ -n "$first" ] && [ "$first" -gt "$from" ] &&
            [ "$(q "select count(*) from runs where slurm_job_id = '$job'")" = 1 ] &&
            ok "scontrol requeue: preempted, requeued, one run resumed from step $from (saved before: $saved; $ev)" ||
            fail "scontrol requeue" "$row; $ev; saved $saved before the requeue, resumed from $from, first step $first"
        same=1
        for r in 0 1 2 3; do cmp -s "full/rank$r.bin" "rq/rank$r.bin" || same=0; done
        [ $same = 1 ] && ok "scontrol requeue: the same weights as the uninterrupted run, bit for bit" ||
            fail "same weights after scontrol requeue" "$(ls -l full rq)"
    else
        fail "scontrol requeue: the job did not complete" "$(q "select status, reason from runs where name = 'rq'") $(job_tail "$job")"
        scancel "$job"
    fi
else
    fail "scontrol requeue: no checkpoint" "$(job_tail "$job")"
    scancel "$job"
fi

# ---- kill -9 of the launcher inside an allocation ---------------------------------------------------
# (a batch shell that lives on, as an salloc shell does: SLURM ends nothing by itself)
{
    echo '#!/bin/bash'
    echo "export PATH=$TR_BIN:\$PATH"
    echo "terarec train $(echo $F) --max_steps 1000000 --checkpoint_every 20 --name lk &"
    echo "echo \$! >$TMP/lk.pid"
    echo 'wait'
    echo 'sleep 600'
} >lk.sh
job=$(sb -N 2 -n 4 lk.sh)
if wait_step lk 40 120; then
    mine="terarec-(worker|loader|ckpt).*$TMP/hist/"
    n=$(pgrep -f "$mine" | wc -l)
    kill -9 "$(cat lk.pid)"
    t0=$(date +%s.%N)
    for i in $(seq 1 100); do [ -z "$(pgrep -f "$mine")" ] && break; sleep 0.1; done
    secs=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")
    left=$(pgrep -f "$mine" | xargs -r ps -o args= -p | cut -c1-60)
    [ "$n" -ge 6 ] && [ -z "$left" ] && ok "kill -9 of the launcher in an allocation: its $n programs ended in $secs s" ||
        fail "kill -9 of the launcher in an allocation" "$n before; after $secs s: $left"
    a=$(find "$TMP/hist/checkpoints" -type f | sort)
    sleep 3
    [ "$a" = "$(find "$TMP/hist/checkpoints" -type f | sort)" ] && ok "no checkpoint file written after its end" ||
        fail "no checkpoint file written after the launcher's end"
else
    fail "kill -9 of the launcher: no progress" "$(job_tail "$job")"
fi
scancel "$job"
wait_job "$job" 30

# ---- kill -9 of one worker on trnode2 ------------------------------------------------------------------
job=$(sb -N 2 -n 4 "$SL/terarec.sbatch" $F --max_steps 1000000 --name k9)
if wait_step k9 20 120; then
    read -r pid host <<<"$(rank_proc k9 3)"
    t0=$(date +%s.%N)
    kill -9 "$pid"
    wait_status k9 30
    secs=$(awk "BEGIN{printf \"%.1f\", $(q "select end_time from runs where name = 'k9'") - $t0}")
    row=$(q "select status, reason from runs where name = 'k9'")
    echo "$row" | grep -qE "^failed\|rank 3 on $host .*(signal 9|Killed)" && [ "$host" = trnode2 ] &&
        awk "BEGIN{exit !($secs <= 10)}" && ok "kill -9 of rank 3: failed in $secs s: $row" ||
        fail "kill -9 of rank 3 ($host)" "$secs s: $row $(job_tail "$job")"
    wait_job "$job" 30
else
    fail "kill -9: no progress" "$(job_tail "$job")"
    scancel "$job"
fi

# ---- ... with --max_restarts 1 --------------------------------------------------------------------------
job=$(sb -N 2 -n 4 "$SL/terarec.sbatch" $F --max_steps 1000 --checkpoint_every 100 --max_restarts 1 --name k9r)
if wait_step k9r 120 120; then
    read -r pid host <<<"$(rank_proc k9r 3)"
    kill -9 "$pid"
    wait_status k9r 180
    row=$(q "select status, restarts, (select max(step) from metrics m where m.run = runs.id) from runs
             where name = 'k9r'")
    [ "$row" = "completed|1|1000" ] && ok "--max_restarts 1: resumed and completed after kill -9" ||
        fail "--max_restarts 1 under SLURM" "$row $(job_tail "$job")"
    wait_job "$job" 30
else
    fail "--max_restarts: no progress" "$(job_tail "$job")"
    scancel "$job"
fi

# ---- SIGSTOP: hung -----------------------------------------------------------------------------------------
# 10 s: at 5 s a loaded 2-core machine (builds beside the test) once stalled the whole
# job for 5 s before the worker was stopped, and the run ended hung too early
job=$(sb -N 2 -n 4 "$SL/terarec.sbatch" $F --max_steps 1000000 --hang_timeout 10 --name hang)
if wait_step hang 20 120; then
    read -r pid host <<<"$(rank_proc hang 3)"
    t0=$(date +%s.%N)
    kill -STOP "$pid"
    wait_status hang 30
    secs=$(awk "BEGIN{printf \"%.1f\", $(q "select end_time from runs where name = 'hang'") - $t0}")
    row=$(q "select status, reason from runs where name = 'hang'")
    echo "$row" | grep -qE "^hung\|no training step for 10 s after step [0-9]+; silent ranks: 3 \($host\)" &&
        awk "BEGIN{exit !($secs <= 15)}" && ok "SIGSTOP on rank 3: hung in $secs s: $row" ||
        fail "SIGSTOP: hung" "$secs s: $row"
    wait_job "$job" 30 || scancel "$job"
    kill -0 "$pid" 2>/dev/null && { fail "the stopped worker is still there"; kill -9 "$pid"; } ||
        ok "the stopped worker was killed"
else
    fail "hang: no progress" "$(job_tail "$job")"
    scancel "$job"
fi

# ---- slurm_multinode.sh with the seed's variables ------------------------------------------------------------
W="--batch_size 256 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --threads 1 --synthetic_dataset_valid_batches 2 --max_steps 20
   --print_freq 10 --columnwise_split --data_parallel_bottom_mlp --log_path="
# a cmd that is just the worker and its flags runs as terarec train (one world of 4 over
# both nodes, recorded in the run history: the test's own, through TR_DB)
n=0
for form in "terarec-worker" "python -u main.py"; do
    n=$((n + 1))
    job=$(TR_DB=$TMP/sm$n.db cmd="$form $(echo $W) --run_name sm$n" srun_flags=--mpi=pmix \
        sb --wait -N 2 -n 4 "$SL/slurm_multinode.sh")
    o="$TMP/$job.out"
    row=$("$TR_BIN/terarec" runs list --db "$TMP/sm$n.db" --columns name,status,steps,workers 2>&1 | grep -w "sm$n")
    grep -q '^slurm_multinode.sh: cmd runs as: terarec train ' "$o" && grep -q '4 workers on 2 nodes' "$o" &&
        grep -q '^step 20/20 ' "$o" && [ "$(echo $row)" = "sm$n completed 20 4" ] &&
        ok "slurm_multinode.sh cmd='$form ...' srun_flags=--mpi=pmix: 4 ranks on 2 nodes trained, recorded ($(echo $row))" ||
        fail "slurm_multinode.sh ($form)" "history: '$row'; $(tail -n 8 "$o")"
done

done_testing
