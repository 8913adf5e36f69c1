#!/usr/bin/env bash
# t4003: a resumed run never starts from step 0 silently (issue 32, items 4 and 6).
# - `terarec train --resume RUN` after RUN's checkpoint store, its run directory,
#   LATEST, the manifest LATEST names or one chunk was deleted: exit 2 with one
#   error naming what is missing, before anything starts (no run row, no
#   process); with --allow_fresh_start it trains from step 0 and the history says so;
# - a requeued SLURM job (the job id in the history, SLURM_RESTART_COUNT=1)
#   continues its own row from the last committed checkpoint whatever ended the
#   attempt before: a worker killed (the row failed) and the launcher killed (the
#   row left running). SLURM is stood in for by its environment and an srun that
#   runs its command here (t5002 runs the real one).
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
cd "$TMP" || exit 1
DB=$TMP/hist/runs.db
M="--batch_size 256 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --threads 1 --synthetic_dataset_valid_batches 2"
q() {
    python3 - "$DB" "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=30)
for r in c.execute(sys.argv[2]):
    print("|".join("" if v is None else str(v) for v in r))
PY
}
wait_step() { # NAME STEP [SECS]: until run NAME has a metric at or past STEP
    local i s
    for i in $(seq 1 $((${3:-60} * 10))); do
        s=$(q "select max(m.step) from metrics m join runs r on r.id = m.run where r.name = '$1'" 2>/dev/null)
        [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0
        sleep 0.1
    done
    return 1
}

# ---- --resume after a deletion --------------------------------------------------------------------
$T train --db "$DB" $M --max_steps 20 --checkpoint_every 10 --print_freq 10 --name base >base.out 2>&1 ||
    { fail "a run to resume" "$(tail -n 5 base.out)"; done_testing; }
CK=$TMP/hist/checkpoints
RUN=$(q "select ckpt_run from runs where name = 'base'")
cp -a "$CK" ck.keep
n0=$(q "select count(*) from runs")
gone() { # NAME REGEX PREPARE: PREPARE deletes something; --resume base must refuse naming it
    local name=$1 re=$2 out rc
    rm -rf "$CK" && cp -a ck.keep "$CK"
    eval "$3"
    out=$(timeout 60 $T train --db "$DB" $M --max_steps 30 --print_freq 10 --resume base 2>&1 </dev/null)
    rc=$?
    if [ $rc -eq 2 ] && echo "$out" | grep -qE -- "$re" && [ "$(echo "$out" | grep -c ' error: ')" -eq 1 ] &&
        echo "$out" | grep -q 'hint: .*--allow_fresh_start' && ! echo "$out" | grep -q '^step '; then
        ok "$name: exit 2 naming it, nothing started"
    else
        fail "$name" "exit $rc: $(echo "$out" | tail -n 4)"
    fi
}
gone "the store deleted" "error: --resume base: .*the checkpoint store '$CK' \(No such file or directory\) is missing" \
    'rm -rf "$CK"'
gone "the run's directory deleted" "error: --resume base: .*the run's checkpoint directory '$CK/runs/$RUN'" \
    'rm -rf "$CK/runs/$RUN"'
gone "LATEST deleted" "error: --resume base: .*'$CK/runs/$RUN/LATEST' \(no committed checkpoint\) is missing" \
    'rm "$CK/runs/$RUN/LATEST"'
gone "the manifest deleted" "error: --resume base: .*the manifest of step 20 that LATEST names" \
    'rm "$CK/runs/$RUN/manifests/20.json"'
gone "a chunk deleted" "error: --resume base: .*chunk [0-9a-f]{32} of tensor '[^']+' in the manifest of step 20 \($CK/chunks/" \
    'rm "$CK/chunks/$(python3 -c "import json,sys; h=json.load(open(sys.argv[1]))[\"tensors\"][0][\"chunks\"][0][\"hash\"]; print(h[:2] + \"/\" + h)" "$CK/runs/$RUN/manifests/20.json")"'
[ "$(q "select count(*) from runs")" = "$n0" ] && ok "no run row for a refused --resume" ||
    fail "no run row for a refused --resume" "$(q 'select name, status from runs')"
rm -rf "$CK" && cp -a ck.keep "$CK" && rm "$CK/runs/$RUN/LATEST"
out=$(timeout 120 $T train --db "$DB" $M --max_steps 30 --print_freq 10 --resume base --allow_fresh_start \
      --name fresh 2>&1 </dev/null)
rc=$?
row=$(q "select r.status, (select group_concat(step) from metrics m where m.run = r.id and m.name = 'loss'),
         (select count(*) from events e where e.run = r.id and e.kind = 'fresh_start') from runs r where r.name = 'fresh'")
[ $rc -eq 0 ] && [ "$row" = "completed|10,20,30|1" ] && echo "$out" | grep -q 'is missing: starting from step 0' &&
    ok "--allow_fresh_start: trains from step 0, said on the console and in the history" ||
    fail "--allow_fresh_start" "exit $rc: $row; $(echo "$out" | tail -n 3)"
fid=$(q "select id from runs where name = 'fresh'")
row=$(q "select ckpt_run from runs where name = 'fresh'")
[ -n "$fid" ] && [ "$row" = "$fid" ] && [ "$(cat "$CK/runs/$fid/LATEST" 2>/dev/null)" = 30 ] &&
    [ ! -e "$CK/runs/$RUN/LATEST" ] && echo "$out" | grep -q "its checkpoints go to run '$fid'" &&
    ok "--allow_fresh_start: saves under a checkpoint run of its own (the other job's name is not taken over)" ||
    fail "--allow_fresh_start: its own checkpoint run" "ckpt_run '$row' of run '$fid', LATEST $(cat "$CK/runs/$fid/LATEST" 2>&1)"
rm -rf "$CK" && cp -a ck.keep "$CK"
out=$(timeout 120 $T train --db "$DB" $M --max_steps 30 --print_freq 10 --resume base --name more 2>&1 </dev/null)
rc=$?
row=$(q "select r.status, (select group_concat(step) from metrics m where m.run = r.id and m.name = 'loss')
         from runs r where r.name = 'more'")
[ $rc -eq 0 ] && [ "$row" = "completed|30" ] && ok "an intact checkpoint resumes (steps 21-30)" ||
    fail "an intact checkpoint resumes" "exit $rc: $row"

# ---- a requeued SLURM job, stood in for ------------------------------------------------------------
if ! command -v mpirun >/dev/null 2>&1 || ! "$TR_BIN/terarec-worker" --version --parsable | grep -qx 'mpi:yes'; then
    skip "a requeued SLURM job" "built without MPI"
    done_testing
fi
mkdir -p bin
cat >bin/srun <<'EOF'
#!/bin/bash
# srun for one node: its options dropped, the command run here; SIGTERM or SIGHUP
# kill it at once, as srun's "forcing job termination" does
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
"$@" &
c=$!
trap 'kill -KILL $c 2>/dev/null' TERM HUP
while :; do
    wait $c
    r=$?
    kill -0 $c 2>/dev/null || exit $r
done
EOF
for c in squeue scancel scontrol; do printf '#!/bin/sh\nexit 0\n' >bin/$c; done
chmod +x bin/*
# slurm JOBID RESTARTS ARGS...: terarec train as inside that job's batch script (exec: in
# the background, $! is the launcher)
slurm() {
    local job=$1 n=$2; shift 2
    local v=(PATH="$TMP/bin:$PATH" SLURM_JOB_ID="$job" SLURM_JOB_NODELIST="$(hostname)" SLURM_NTASKS=1
             SLURM_JOB_NUM_NODES=1)
    [ "$n" -gt 0 ] && v+=(SLURM_RESTART_COUNT="$n")
    exec env -u SLURM_RESTART_COUNT "${v[@]}" $T train --db "$DB" $M --print_freq 10 --checkpoint_every "${CKE:-20}" "$@"
}
# requeued NAME JOB: the job started again continues NAME's row from its last checkpoint and completes
requeued() {
    local name=$1 job=$2 last out rc row
    last=$(q "select max(c.step) from checkpoints c join runs r on r.id = c.run where r.name = '$name'")
    out=$(slurm "$job" 1 --max_steps 2000 --name "$name" 2>&1 </dev/null)
    rc=$?
    row=$(q "select count(*), min(status), max(restarts) >= 1 from runs where slurm_job_id = '$job'")
    local from
    from=$(q "select json_extract(e.data, '$.from_step') from events e join runs r on r.id = e.run
              where r.name = '$name' and e.kind = 'restarted' order by e.time desc limit 1")
    local first
    first=$(q "select min(m.step) from metrics m join runs r on r.id = m.run where r.name = '$name'
               and m.name = 'loss' and m.time > (select max(time) from events e where e.run = r.id
               and e.kind = 'requeued')")
    # (LATEST may be past the last checkpoint recorded: the launcher killed, the
    # workers' last save still went through)
    if [ $rc -eq 0 ] && [ "$row" = "1|completed|1" ] && [ -n "$last" ] && [ "$last" -ge 20 ] && [ -n "$from" ] &&
        [ "$from" -ge "$last" ] && [ -n "$first" ] && [ "$first" -gt "$from" ]; then
        ok "$3: the requeued job continues its run from step $from (first new step $first), one row"
    else
        fail "$3" "exit $rc: rows|status|restarted: $row; last checkpoint $last, from $from, first step $first;
            $(echo "$out" | tail -n 4)"
    fi
}

slurm 4201 0 --max_steps 1000000 --name rq-failed >rqf.out 2>&1 &
lp=$!
if wait_step rq-failed 60 60; then
    kill -9 "$(q "select p.pid from processes p join runs r on r.id = p.run where r.name = 'rq-failed'")"
    wait $lp
    [ "$(q "select status from runs where name = 'rq-failed'")" = failed ] && ok "a worker killed: the row failed" ||
        fail "a worker killed: the row failed" "$(q "select status, reason from runs where name = 'rq-failed'")"
    requeued rq-failed 4201 "after a failed attempt"
else
    kill -9 $lp; wait $lp
    fail "requeue after a failure: no progress" "$(tail -n 5 rqf.out)"
fi

slurm 4202 0 --max_steps 1000000 --name rq-lost >rql.out 2>&1 &
lp=$!
if wait_step rq-lost 60 60; then
    kill -9 $lp
    wait $lp 2>/dev/null
    for i in $(seq 1 100); do [ -z "$(own_pids 'terarec-(worker|loader|ckpt)')" ] && break; sleep 0.1; done
    [ "$(q "select status from runs where name = 'rq-lost'")" = running ] && ok "the launcher killed: the row left running" ||
        fail "the launcher killed: the row left running" "$(q "select status from runs where name = 'rq-lost'")"
    requeued rq-lost 4202 "after the launcher was killed"
else
    kill -9 $lp; wait $lp
    fail "requeue after a lost launcher: no progress" "$(tail -n 5 rql.out)"
fi

# a requeued job whose attempt before never committed a checkpoint: step 0 again, said
# on the console, into the same row and the same checkpoint run (its workers resume a
# run with nothing in it yet: a fresh claim would be refused as another job's)
CKE=1000000 slurm 4203 0 --max_steps 1000000 --name rq-none >rqn.out 2>&1 &
lp=$!
if wait_step rq-none 10 60; then
    kill -9 "$(q "select p.pid from processes p join runs r on r.id = p.run where r.name = 'rq-none'")"
    wait $lp
    ck0=$(q "select ckpt_run from runs where name = 'rq-none'")
    out=$(CKE=20 slurm 4203 1 --max_steps 40 --name rq-none 2>&1 </dev/null)
    rc=$?
    row=$(q "select count(*), min(status), min(ckpt_run) = '$ck0' from runs where slurm_job_id = '4203'")
    first=$(q "select min(m.step) from metrics m join runs r on r.id = m.run where r.name = 'rq-none'
               and m.name = 'loss' and m.time > (select max(time) from events e where e.run = r.id
               and e.kind = 'requeued')")
    [ $rc -eq 0 ] && [ "$row" = "1|completed|1" ] && [ "$first" = 10 ] &&
        echo "$out" | grep -q 'no checkpoint was committed before' &&
        ok "nothing saved before the requeue: step 0 again in the same row and checkpoint run, said so" ||
        fail "nothing saved before the requeue" "exit $rc: rows|status|same ckpt run: $row; first step $first;
            $(echo "$out" | tail -n 4)"
else
    kill -9 $lp; wait $lp
    fail "requeue with nothing saved: no progress" "$(tail -n 5 rqn.out)"
fi

# a second `terarec train` in the same job, not requeued, after a completed run: a new row
out=$(slurm 4201 0 --max_steps 20 --name second 2>&1 </dev/null)
[ "$(q "select count(*) from runs where slurm_job_id = '4201'")" = 2 ] &&
    [ "$(q "select status from runs where name = 'second'")" = completed ] &&
    ok "a second run in the same job after a completed one: a new row" ||
    fail "a second run in the same job" "$(q "select name, status from runs where slurm_job_id = '4201'")"

done_testing
