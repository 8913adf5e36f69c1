#!/usr/bin/env bash
# t5003: `terarec train --elastic` under a real SLURM cluster (slurm/local_cluster.sh:
# munged, slurmctld and 4 slurmd in network namespaces on this machine), 4 nodes x 1
# worker, one cluster start for every case:
# - a node lost (its slurmd and every process in its namespace killed with SIGKILL,
#   as when it crashes): the run goes on on the 3 nodes left (the probe finds that
#   the lost node's slurmd does not answer), from the last checkpoint committed
#   before the loss; none of the committed checkpoints is lost (each manifest is in
#   the store and verifies); the history shows the change;
# - the node returns (its slurmd started again): the run grows back to 4 at the
#   next committed checkpoint, with a checkpoint store started again on it;
# - the run completes with the final AUC within 0.002 of an uninterrupted run's
#   (and every step's mean loss within 1e-4: a change of world moves them by under
#   1e-8 on this model, see t4008);
# - MIN not reachable (--elastic 4, a node lost): the run stops saying why, is
#   recorded preempted and requeues its job (scontrol requeue), which resumes the
#   same run on 4 nodes once the node is back, and completes;
# - a node whose worker died --elastic_max_failures times (1 here) is left out
#   for the rest of the run: the next srun has --exclude=NODE, said on the console.
# The jobs are submitted with sbatch --no-kill, which an elastic run needs (a node
# lost must not end the job). SKIPs without root, namespaces or the SLURM/munge
# commands; under CI=true a SKIP fails.
# run.sh: holds slurm (a SLURM cluster of its own: daemons on fixed ports, network namespaces)
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
SL=$TR_ROOT/slurm
CDIR=/var/spool/terarec-slurm-t5003
CTAG=trslv
cluster() {
    local s=$1; shift
    TR_SLURM_DIR=$CDIR TR_SLURM_TAG=$CTAG TR_SLURM_SUBNET=10.231.77 TR_SLURM_PORT=6931 \
        TR_SLURM_KILLWAIT=10 TR_SLURM_TIMEOUT=30 timeout -k 10 120 "$SL/$s" "$@"
}
why=""
[ "$(id -u)" -eq 0 ] || why="not root (the cluster needs namespaces, a bridge and daemons run as root)"
if [ -z "$why" ]; then
    for c in slurmctld:slurmctld slurmd:slurmd srun:slurm-client sbatch:slurm-client munged:munge ip:iproute2 \
             python3:python3 mpirun:openmpi-bin; do
        command -v "${c%%:*}" >/dev/null 2>&1 || why="${why:+$why, }no ${c%%:*} (package ${c#*:})"
    done
    [ -n "$why" ] && why="$why; run 'make deps'"
fi
[ -z "$why" ] && ! unshare --net --uts --mount true 2>/dev/null && why="cannot create namespaces here"
[ -z "$why" ] && ! "$TR_BIN/terarec-worker" --version --parsable | grep -qx 'mpi:yes' && why="built without MPI"
if [ -n "$why" ]; then
    if [ "${CI:-}" = true ]; then fail "slurm elastic test runs in CI" "$why"; else skip "slurm elastic" "$why"; fi
    done_testing
fi
mkdir -p /run/lock && exec 9>/run/lock/terarec-t5003.lock
flock -w 300 9 || { fail "another t5003 holds its lock"; done_testing; }
on_exit() {
    cluster local_cluster_stop.sh --purge >/dev/null 2>&1
    rm -rf "$TMP"
}
trap on_exit EXIT
trap 'exit 130' INT TERM
cd "$TMP" || exit 1
DB=$TMP/hist/runs.db
F="--batch_size 256 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --optimizer adagrad --learning_rate 0.05 --warmup_steps 0 --threads 1
   --synthetic_dataset_valid_batches 16 --columnwise_split --data_parallel_bottom_mlp --print_freq 25
   --checkpoint_every 100 --keep_checkpoints 0"

# ---- the uninterrupted run (here, 4 workers under mpirun: the same model as 4 nodes x 1) -----------
(use_mpi; $T train --db "$TMP/ref.db" --workers 4 $F --max_steps 3000 --name ref >ref.out 2>&1) ||
    fail "the uninterrupted run" "$(tail -n 5 ref.out)"

cluster local_cluster_stop.sh --purge >/dev/null 2>&1
out=$(cluster local_cluster.sh 4 2>&1)
if [ "$(echo "$out" | tail -n 1)" != "cluster ready" ]; then
    fail "local_cluster.sh 4: cluster ready" "$(echo "$out" | tail -n 20)"
    done_testing
fi
ok "cluster of 4 nodes ready"
export SLURM_CONF=$CDIR/etc/slurm.conf
export OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_mpi_yield_when_idle=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export TR_BIN
q() {
    python3 - "$DB" "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=30)
for r in c.execute(sys.argv[2]):
    print("|".join("" if v is None else str(v) for v in r))
PY
}
poll() { # SECS TEST QUERY ARGS...: until TEST holds for the query's one value (v), or SECS pass
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
wait_ckpt() { poll "${3:-120}" "v >= $2" "select max(c.step) from checkpoints c join runs r on r.id = c.run where r.name = ?" "$1"; }
wait_status() { poll "$3" "v == '$2'" "select status from runs where name = ?" "$1"; }
wait_resized() { # NAME WHY SECS: a resized event of that kind, recorded (at the new world's first step)
    poll "$3" "v >= 1" "select count(*) from events e join runs r on r.id = e.run where r.name = ? and e.kind = 'resized'
                        and json_extract(e.data, '$.why') = ? and json_extract(e.data, '$.incomplete') is null" "$1" "$2"
}
wait_job() { # JOBID SECS
    local i
    for i in $(seq 1 $(($2 * 10))); do
        [ -z "$(squeue -h -j "$1" 2>/dev/null)" ] && return 0
        sleep 0.1
    done
    return 1
}
release() { # JOBID: a requeued job, pending again, made eligible (SLURM holds it back 2 minutes)
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
# node_settled NAME SECS: the node answers and has no job left to complete (a node that was
# down when its job was requeued learns of it when its slurmd is back, and a step of the job's
# next start there meanwhile is refused: "Job credential revoked")
node_settled() {
    local i st
    for i in $(seq 1 $(($2 * 10))); do
        st=$(scontrol show node "$1" -o 2>/dev/null | sed -n 's/.* State=\([^ ]*\).*/\1/p')
        [ "$st" = IDLE ] && return 0
        sleep 0.1
    done
    return 1
}
# kill_node N: node N crashes: its slurmd and every process in its namespace, SIGKILL
kill_node() {
    # shellcheck disable=SC2046
    kill -9 $(ip netns pids "$CTAG-node$1") 2>/dev/null
}
job_tail() { # JOBID: what a failure shows of a job: its console, SLURM's view, its run's logs
    grep -E "terarec|error|warn|hint" "$TMP/$1.out" | tail -n 20
    squeue -s 2>&1 | tail -n 8
    sed -n 's/.*; logs in \(.*\)$/\1/p' "$TMP/$1.out" | sort -u | while read -r d; do
        for f in workers.log ckpt.log loader.log; do echo "# $f:"; tail -n 12 "$d/$f" 2>&1 | cut -c1-300; done
    done
    for f in slurmctld slurmd-trnode4; do echo "# $f.log:"; tail -n 25 "$CDIR/log/$f.log" 2>&1 | cut -c1-250; done
}
sb() { sbatch --parsable -k -o "$TMP/%j.out" "$@" | cut -d';' -f1; }

# ---- a node lost, and back ------------------------------------------------------------------------
job=$(sb -N 4 -n 4 "$SL/terarec.sbatch" --db "$DB" $F --max_steps 3000 --elastic 3n --name el)
if wait_ckpt el 300 180; then
    t_kill=$(date +%s.%N)
    kill_node 4
    if wait_resized el lost 120; then
        ok "node 4 lost: the run went on on 3 nodes"
        out=$(cluster local_cluster.sh 4 2>&1)
        [ "$(echo "$out" | tail -n 1)" = "cluster ready" ] && ok "node 4 back (its slurmd started again)" ||
            fail "node 4 back" "$(echo "$out" | tail -n 8)"
        wait_resized el grow 120 || fail "the run grows back to 4" "$(job_tail "$job")"
    else
        fail "node 4 lost: the run goes on" "$(job_tail "$job")"
    fi
    wait_status el completed 300 || fail "the elastic run completes" "$(q "select status, reason from runs where name = 'el'") $(job_tail "$job")"
    wait_job "$job" 60
else
    fail "the elastic run: no checkpoint" "$(job_tail "$job")"
    scancel "$job"
fi
row=$(q "select status, workers, nodes from runs where name = 'el'")
worlds=$(q "select group_concat(w || '@' || h, ' ') from (select count(*) as w, group_concat(host, ',') as h from
            (select * from processes order by rank) p join runs r on r.id = p.run where r.name = 'el' group by p.attempt
            order by p.attempt)")
[ "$row" = "completed|4|4" ] && [ "$worlds" = "4@trnode1,trnode2,trnode3,trnode4 3@trnode1,trnode2,trnode3 4@trnode1,trnode2,trnode3,trnode4" ] &&
    ok "completed; its attempts' worlds: $worlds" || fail "the attempts' worlds" "$row: $worlds"
ev=$(q "select group_concat(json_extract(data, '$.why') || ':' || json_extract(data, '$.world_before') || '>' ||
        json_extract(data, '$.world'), ' ') from (select data from events e join runs r on r.id = e.run
        where r.name = 'el' and e.kind = 'resized' order by e.time)")
lost=$(q "select json_extract(data, '$.lost.rank') || ':' || json_extract(data, '$.lost.host') || ':' ||
          json_extract(data, '$.left_out[0].slot') || '=' || json_extract(data, '$.left_out[0].state') || ':' ||
          json_extract(data, '$.from_step') from events e join runs r on r.id = e.run where r.name = 'el'
          and e.kind = 'resized' and json_extract(data, '$.why') = 'lost'")
# the last checkpoint committed before the new world started (the loss's time and its
# downtime): not only those before the kill, as a save under way can reach its commit
# after it, and one rank 0 did not live to report is recorded as the attempt ends
before=$(q "select max(c.step) from checkpoints c join runs r on r.id = c.run join events e on e.run = r.id
            where r.name = 'el' and e.kind = 'resized' and json_extract(e.data, '$.why') = 'lost'
            and c.time < e.time + json_extract(e.data, '$.downtime_s')")
[ "$ev" = "lost:4>3 grow:3>4" ] && [ "$lost" = "3:trnode4:trnode4=down:$before" ] &&
    ok "the history: $ev; rank 3 on trnode4 lost, trnode4 down, restored from step $before (the last checkpoint committed before the loss)" ||
    fail "the history of the changes" "$ev; $lost (the last checkpoint committed before the loss: $before); the kill at $t_kill; checkpoints: $(q "select group_concat(c.step || '@' || c.time, ' ') from checkpoints c join runs r on r.id = c.run where r.name = 'el'"); the loss: $(q "select e.time || ' ' || e.data from events e join runs r on r.id = e.run where r.name = 'el' and e.kind = 'resized'" | head -n 1)"
o=$TMP/$job.out
grep -q "^terarec: elastic: rank 3 (trnode4) .* at step [0-9]*: asking the allocation's nodes whether they answer" "$o" &&
    grep -qE "^terarec: elastic: node trnode4 does not answer \((its slurmd|probe step|state).*\): left out until it does" "$o" &&
    grep -q "^terarec: elastic: node trnode4 answers again" "$o" &&
    grep -q "^terarec: elastic: 4 workers training from step " "$o" &&
    ok "the console says the loss, the probe's answer, the node's return and the growth" ||
    fail "the console" "$(grep elastic "$o")"
rd=$(sed -n 's/.*; logs in \(.*\)$/\1/p' "$o" | head -n 1)
grep -q "terarec-ckpt: listening on" "$rd/ckpt-trnode4.log" 2>/dev/null &&
    ok "a checkpoint store started again on trnode4 before the run grew onto it" ||
    fail "the store on trnode4" "$(tail -n 3 "$rd/ckpt-trnode4.log" 2>&1)"
# the stores' port is below the ephemeral range (launcher/start.c free_port), where
# no socket bound to port 0 or connecting out can take it before they bind it
lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
port=$(sed -n 's|^terarec-ckpt: listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$rd/ckpt.log" 2>/dev/null | head -n 1)
if [ -n "$lo" ] && [ "$lo" -gt 10100 ]; then
    [ -n "$port" ] && [ "$port" -ge 10000 ] && [ "$port" -lt "$lo" ] &&
        ok "the stores listen on port $port, below the ephemeral range (from $lo)" ||
        fail "the stores' port" "'$port' against the ephemeral range from $lo: $(head -n 3 "$rd/ckpt.log" 2>&1)"
fi
# no committed checkpoint lost: every one the history has is in the store, and verifies
crun=$(q "select ckpt_run from runs where name = 'el'")
root=$TMP/hist/checkpoints
nbad=0 n=0
for s in $(q "select step from checkpoints c join runs r on r.id = c.run where r.name = 'el' order by step"); do
    n=$((n + 1))
    [ -s "$root/runs/$crun/manifests/$s.json" ] &&
        $T ckpt verify --checkpoint_dir "$root" --run_name "$crun" --step "$s" >/dev/null 2>&1 || nbad=$((nbad + 1))
done
[ "$n" -ge 25 ] && [ "$nbad" = 0 ] && [ "$(cat "$root/runs/$crun/LATEST" 2>/dev/null)" = 3000 ] &&
    ok "none of the $n committed checkpoints is lost: each is in the store and verifies; LATEST is 3000" ||
    fail "the committed checkpoints" "$nbad of $n missing or bad; LATEST $(cat "$root/runs/$crun/LATEST" 2>&1)"
# the same model as the uninterrupted run
auc=$(python3 - "$DB" "$TMP/ref.db" <<'PY'
import sqlite3, sys
a = sqlite3.connect(sys.argv[1]).execute("SELECT e.auc FROM evals e JOIN runs r ON r.id = e.run WHERE r.name = 'el'"
                                         " AND e.step = 3000").fetchone()
b = sqlite3.connect(sys.argv[2]).execute("SELECT auc FROM evals WHERE step = 3000").fetchone()
print("%s|%s|%s" % (a[0], b[0], abs(a[0] - b[0])) if a and b else "missing")
PY
)
awk -v d="${auc##*|}" 'BEGIN{exit !(d != "" && d != "missing" && d <= 0.002)}' &&
    ok "the final AUC within 0.002 of the uninterrupted run's ($auc)" || fail "the final AUC" "el|ref|diff: $auc"
loss=$(python3 - "$DB" "$TMP/ref.db" <<'PY'
import json, sqlite3, sys
e = sqlite3.connect(sys.argv[1])
run = e.execute("SELECT id FROM runs WHERE name = 'el'").fetchone()[0]
ref = dict(sqlite3.connect(sys.argv[2]).execute("SELECT step, value FROM metrics WHERE name = 'loss'").fetchall())
starts = [(t, json.loads(d)["from_step"]) for t, d in e.execute(
    "SELECT time, data FROM events WHERE run = ? AND kind = 'restarted'", (run,))]
worst, n = 0.0, 0
for s, v, t in e.execute("SELECT step, value, time FROM metrics WHERE run = ? AND name = 'loss'", (run,)):
    # a report right after a restart from a step off the print grid is the mean of fewer steps
    if any(t > t0 and f % 25 and s - f < 25 for t0, f in starts):
        continue
    worst, n = max(worst, abs(v - ref[s])), n + 1
print("%d|%g" % (n, worst))
PY
)
awk -v d="${loss##*|}" 'BEGIN{exit !(d != "" && d <= 1e-4)}' &&
    ok "each step's loss within 1e-4 of the uninterrupted run's (${loss%%|*} rows, at most ${loss##*|})" ||
    fail "the losses" "$loss"
echo "# from the loss (the kill at $t_kill) to the first step on fewer nodes, and back to 4:"
q "select json_extract(data, '$.why'), round(json_extract(data, '$.downtime_s'), 3), data from events e join runs r
   on r.id = e.run where r.name = 'el' and e.kind = 'resized' order by e.time" |
    sed -n 's/^\([a-z]*\)|\([0-9.]*\)|.*"phases":\({[^}]*}\).*/#   \1: \2 s \3/p'

# ---- MIN not reachable: stopped, requeued, resumed ------------------------------------------------------
job=$(sb -N 4 -n 4 "$SL/terarec.sbatch" --db "$DB" $F --max_steps 1500 --elastic 4 --name min)
if wait_ckpt min 200 180; then
    kill_node 4
    if wait_status min preempted 120; then
        reason=$(q "select reason from runs where name = 'min'")
        echo "$reason" | grep -qE "^elastic: 3 of the run's 4 nodes usable \(trnode4 down\); --elastic 4 needs 4 workers: the job is requeued to wait for them at step [0-9]+" &&
            ok "MIN not reachable: preempted, saying why ($reason)" || fail "MIN not reachable: the reason" "$reason"
        out=$(cluster local_cluster.sh 4 2>&1)
        [ "$(echo "$out" | tail -n 1)" = "cluster ready" ] || fail "node 4 back" "$(echo "$out" | tail -n 8)"
        node_settled trnode4 30 || echo "# trnode4 not idle after 30 s: $(scontrol show node trnode4 -o | grep -o 'State=[^ ]*')"
        release "$job"
        wait_status min completed 240 || fail "the requeued job completes" "$(q "select status, reason from runs where name = 'min'") $(job_tail "$job")"
    else
        fail "MIN not reachable: preempted" "$(q "select status, reason from runs where name = 'min'") $(job_tail "$job")"
    fi
    wait_job "$job" 60 || scancel "$job"
else
    fail "MIN not reachable: no checkpoint" "$(job_tail "$job")"
    scancel "$job"
fi
ev=$(q "select group_concat(kind, ',') from (select kind from events e join runs r on r.id = e.run where r.name = 'min'
        and kind in ('elastic_stop', 'preempted', 'requeue', 'requeued', 'restarted', 'completed', 'failed') order by e.time)")
row=$(q "select status, restarts, (select max(step) from metrics m where m.run = runs.id), slurm_job_id = '$job' from runs
         where name = 'min'")
[ "$ev" = "elastic_stop,preempted,requeue,requeued,restarted,completed" ] && [ "$row" = "completed|1|1500|1" ] &&
    ok "the requeued job resumed the same run on 4 nodes and completed ($ev)" ||
    fail "the requeue" "$ev; $row; $(q "select kind, data from events e join runs r on r.id = e.run where r.name = 'min'
                                       and kind in ('resized', 'failed_attempt') order by e.time") $(job_tail "$job")"

# ---- a node whose workers die too often is left out: srun --exclude ------------------------------------
# (--elastic_max_failures 1: the first death on a node is one too many; the node itself answers)
job=$(sb -N 4 -n 4 "$SL/terarec.sbatch" --db "$DB" $F --max_steps 800 --elastic 2n --elastic_max_failures 1 --name ex)
if wait_ckpt ex 200 180; then
    pid=$(q "select p.pid from processes p join runs r on r.id = p.run where r.name = 'ex' and p.rank = 2 and p.host = 'trnode3'")
    [ -n "$pid" ] && kill -9 "$pid"
    wait_status ex completed 240 || fail "the run with a node left out completes" "$(job_tail "$job")"
    wait_job "$job" 60 || scancel "$job"
else
    fail "left out: no checkpoint" "$(job_tail "$job")"
    scancel "$job"
fi
worlds=$(q "select group_concat(w || '@' || h, ' ') from (select count(*) as w, group_concat(host, ',') as h from
            (select * from processes order by rank) p join runs r on r.id = p.run where r.name = 'ex' group by p.attempt
            order by p.attempt)")
o=$TMP/$job.out
rd=$(sed -n 's/.*; logs in \(.*\)$/\1/p' "$o" | head -n 1)
[ "$worlds" = "4@trnode1,trnode2,trnode3,trnode4 3@trnode1,trnode2,trnode4" ] &&
    grep -q "^terarec: elastic: rank 2 (trnode3) .*: its workers died 1 time: left out for the rest of the run" "$o" &&
    grep -q "^terarec: elastic: left out for the rest of the run: trnode3 (srun --exclude=trnode3)" "$o" &&
    grep -q "^terarec: attempt 1: srun .*--nodelist=trnode1,trnode2,trnode4 --exclude=trnode3 " "$rd/workers.log" &&
    ok "a node whose worker died once with --elastic_max_failures 1: left out (srun --exclude=trnode3), said, and the run completed on 3 ($worlds)" ||
    fail "a node left out" "$worlds; $(grep elastic "$o"); $(grep '^terarec: attempt 1' "$rd/workers.log" | cut -c1-300)"

done_testing
