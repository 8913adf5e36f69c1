#!/usr/bin/env bash
# t4007: `terarec train --resume`, the console's messages, and the threads (issue 34):
# - --resume RUN without flags trains with RUN's configuration (its model, batch,
#   steps: not the demo), said on the console; a flag given overrides RUN's and is
#   listed ("overridden: --max_steps 30 (was 20)"); a RUN that trained all its
#   steps is refused (exit 2, "nothing to train", a hint naming --max_steps), and
#   terarec-worker --resume at its run's last step warns so, with the hint;
# - two --resume X each continue X from X's checkpoint (resumed_from X, a
#   checkpoint run of their own each, X's LATEST untouched): the second does not
#   continue the first;
# - a worker's warn line ("--warmup_steps ... is longer than the run") is on the
#   console with its rank and host;
# - the default thread count and the OpenMP wait policy are on the console and in
#   the history (terarec runs show); a worker alone starts itself again with the
#   passive policy in its environment (not when the dynamic loader started it);
# - a stop names the step of the checkpoint saved (the store's LATEST): SIGTERM
#   here (cancelled); SIGUSR1 in a SLURM job stood in for (preempted, requeued)
#   whose scancel fails on a step that has ended and whose 'scontrol requeue' is
#   killed by the requeue it asked for: no "could not signal", no "failed".
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
cd "$TMP" || exit 1
DB=$TMP/hist/runs.db
CK=$TMP/hist/checkpoints
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
param() { # NAME KEY: the value of KEY in run NAME's params event
    q "select json_extract(e.data, '$.$2') from events e join runs r on r.id = e.run
       where r.name = '$1' and e.kind = 'params' order by e.time limit 1"
}
from_step() { # NAME: the step run NAME's first attempt restored
    q "select json_extract(e.data, '$.from_step') from events e join runs r on r.id = e.run
       where r.name = '$1' and e.kind = 'started'"
}
losses() { # NAME: the steps of run NAME's loss metrics
    q "select group_concat(step) from (select m.step from metrics m join runs r on r.id = m.run
       where r.name = '$1' and m.name = 'loss' order by m.step)"
}

# ---- --resume RUN: its configuration ------------------------------------------------------------------
$T train --db "$DB" $M --max_steps 20 --checkpoint_every 10 --print_freq 10 --name X >x.out 2>&1 ||
    { fail "a run to resume" "$(tail -n 5 x.out)"; done_testing; }
XID=$(q "select id from runs where name = 'X'")
n0=$(q "select count(*) from runs")
out=$(timeout 60 $T train --db "$DB" --resume X 2>&1 </dev/null)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "error: --resume X: nothing to train: its checkpoint is of step 20 and --max_steps is 20" &&
    echo "$out" | grep -q "hint: --max_steps N (more than 20)" && ! echo "$out" | grep -q "completed" &&
    [ "$(q "select count(*) from runs")" = "$n0" ] &&
    ok "--resume of a run that trained all its steps: nothing to train (exit 2, a hint), no run" ||
    fail "--resume of a completed run" "exit $rc: $out"

# the worker alone, resumed at its last step: a warning with a hint, not a silent end
out=$(timeout 60 $TR_BIN/terarec-worker $M --max_steps 20 --checkpoint_dir "$CK" --run_name "$XID" --resume \
      --log_path= 2>&1 </dev/null)
rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "warn: the checkpoint restored is of step 20 and the run has 20 steps: nothing to train" &&
    echo "$out" | grep -q "hint: --max_steps N (more than 20)" &&
    ok "terarec-worker --resume at the run's last step: nothing to train, said with a hint" ||
    fail "terarec-worker --resume at the run's last step" "exit $rc: $(echo "$out" | tail -n 4)"

# two forks of X: each continues X from its step 20; the first also warns (warmup)
out1=$(timeout 120 $T train --db "$DB" --resume X --max_steps 30 --warmup_steps 100 --name f1 2>&1 </dev/null)
rc1=$?
out2=$(timeout 120 $T train --db "$DB" --resume X --max_steps 40 --threads 0 --name f2 2>&1 </dev/null)
rc2=$?
echo "$out1" | grep -qx "terarec: resuming X with its configuration; overridden: --warmup_steps 100 (was 0), --max_steps 30 (was 20)" &&
    ! echo "$out1$out2" | grep -q "built-in demo" &&
    echo "$out2" | grep -qE "^terarec: run [0-9a-f-]+ \(continues run $XID from its checkpoint of step 20\): 1 worker" &&
    [ "$(param f1 batch_size)|$(param f1 embedding_dim)|$(param f1 checkpoint_every)|$(param f2 bottom_mlp_dims)" = "256|8|10|[16,8]" ] &&
    ok "--resume X: X's flags apply (model, batch, checkpoints: not the demo), the overrides listed" ||
    fail "--resume X takes X's configuration" "$out1"
row=$(q "select group_concat(r.status || ':' || (r.resumed_from = '$XID') || ':' || (r.ckpt_run = r.id), ' ')
         from runs r where r.name in ('f1', 'f2')")
[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$row" = "completed:1:1 completed:1:1" ] &&
    [ "$(from_step f1)|$(from_step f2)" = "20|20" ] && [ "$(losses f1)|$(losses f2)" = "30|30,40" ] &&
    [ "$(cat "$CK/runs/$XID/LATEST")" = 20 ] &&
    ok "two --resume X: each continues X from its step 20 (own checkpoint run, X's untouched)" ||
    fail "two forks of X" "exit $rc1/$rc2: $row; from $(from_step f1)/$(from_step f2); losses $(losses f1)/$(losses f2);
        X's LATEST $(cat "$CK/runs/$XID/LATEST"); $(echo "$out2" | tail -n 3)"

# ---- the workers' warnings on the console --------------------------------------------------------------
echo "$out1" | grep -qE '^warn: \[rank 0 on [^]]+\] --warmup_steps 100 is longer than the run \(30 steps\)' &&
    ok "a worker's warning is on the console, with its rank and host" ||
    fail "a worker's warning on the console" "$out1"

# ---- threads --------------------------------------------------------------------------------------------
echo "$out2" | grep -qE '^terarec: threads per worker: [0-9]+ \(affinity [0-9]+ cpus?[^)]*, 1 worker\); OpenMP wait policy passive$' &&
    echo "$out1" | grep -qx 'terarec: threads per worker: 1 (--threads 1); OpenMP wait policy passive' &&
    $T runs show f2 --db "$DB" | grep -qE '"threads_choice":"[0-9]+ \(affinity [0-9]+ cpu' &&
    $T runs show f2 --db "$DB" | grep -q '"omp_wait_policy":"passive"' &&
    ok "the threads chosen and the wait policy: on the console and in the history" ||
    fail "the threads chosen" "$(echo "$out2" | grep threads); $($T runs show f2 --db "$DB" | grep -o '"threads_choice":"[^"]*"')"
out=$(OMP_WAIT_POLICY=active timeout 60 $T train --db "$DB" $M --max_steps 2 --print_freq 1 2>&1 </dev/null)
echo "$out" | grep -q 'OpenMP wait policy active$' && ok "OMP_WAIT_POLICY set by the user stays" ||
    fail "OMP_WAIT_POLICY set by the user" "$(echo "$out" | grep threads)"

# the worker alone starts itself again with the passive policy (the OpenMP runtime
# reads its environment when it is loaded): the process's own environment has it
env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT TR_LOG=info $TR_BIN/terarec-worker $M --max_steps 1000000 --log_path= \
    >wk.out 2>&1 </dev/null &
wp=$!
envp=""
for _ in $(seq 100); do
    envp=$(tr '\0' '\n' <"/proc/$wp/environ" 2>/dev/null | grep -x 'OMP_WAIT_POLICY=passive')
    [ -n "$envp" ] && grep -q "OpenMP wait policy passive" wk.out && break
    sleep 0.1
done
kill -9 $wp 2>/dev/null; wait $wp 2>/dev/null
[ -n "$envp" ] && grep -q "OpenMP wait policy passive" wk.out &&
    ok "terarec-worker alone: started again with OMP_WAIT_POLICY=passive in its environment" ||
    fail "terarec-worker alone: the passive policy" "$envp; $(tail -n 3 wk.out)"
ld=$(ls /lib64/ld-linux-*.so.* /lib/ld-linux-*.so.* 2>/dev/null | head -n 1)
if [ -n "$ld" ]; then
    out=$(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT TR_LOG=info timeout 60 "$ld" $TR_BIN/terarec-worker $M --max_steps 2 \
          --log_path= 2>&1 </dev/null)
    echo "$out" | grep -q "OpenMP wait policy default" &&
        ok "started by the dynamic loader by name: no restart, the policy recorded as the runtime has it" ||
        fail "started by the dynamic loader" "$(echo "$out" | grep -i 'policy\|error' | head -n 3)"
fi

# ---- a stop names the checkpoint saved -----------------------------------------------------------------
$T train --db "$DB" $M --max_steps 600 --print_freq 10 --checkpoint_every 1000 --name C >c.out 2>&1 &
lp=$!
if wait_step C 10 60; then
    kill -TERM $lp
    wait $lp
    rc=$?
    cid=$(q "select id from runs where name = 'C'")
    s=$(cat "$CK/runs/$cid/LATEST" 2>/dev/null)
    [ $rc -eq 130 ] && [ -n "$s" ] && grep -q "terarec: run $cid cancelled: cancelled at step [0-9]*; the checkpoint of step $s is saved" c.out &&
        ok "SIGTERM: cancelled, naming the step of the checkpoint saved ($s)" ||
        fail "SIGTERM names the checkpoint saved" "exit $rc, LATEST $s: $(tail -n 3 c.out)"
    # resumed without flags: C's configuration, from its checkpoint to its --max_steps
    out=$(timeout 120 $T train --db "$DB" --resume C --name C2 2>&1 </dev/null)
    rc=$?
    [ $rc -eq 0 ] && echo "$out" | grep -qx "terarec: resuming C with its configuration; no flag overridden" &&
        [ "$(from_step C2)" = "$s" ] && [ "$(param C2 max_steps)|$(param C2 embedding_dim)" = "600|8" ] &&
        [ "$(q "select max(step) from metrics m join runs r on r.id = m.run where r.name = 'C2'")" = 600 ] &&
        ok "--resume C without flags: C's configuration, steps $((s + 1))-600" ||
        fail "--resume C without flags" "exit $rc, from $(from_step C2): $(echo "$out" | tail -n 4)"
else
    kill -9 $lp; wait $lp
    fail "SIGTERM: no progress" "$(tail -n 5 c.out)"
fi

# SIGUSR1 in a SLURM job (stood in for: srun runs its command here, squeue lists the
# store's step, scancel fails as on a step that has just ended, scontrol requeue is
# killed by the job's end, as a requeue does)
if ! command -v mpirun >/dev/null 2>&1 || ! "$TR_BIN/terarec-worker" --version --parsable | grep -qx 'mpi:yes'; then
    skip "SIGUSR1 in a SLURM job" "built without MPI"
    done_testing
fi
mkdir -p bin
cat >bin/srun <<'EOF'
#!/bin/bash
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
printf '#!/bin/sh\necho "$SLURM_JOB_ID.0 terarec-ckpt"\n' >bin/squeue
printf '#!/bin/sh\necho "scancel: error: step already completed" >&2\nexit 1\n' >bin/scancel
printf '#!/bin/sh\necho "$*" >>"%s/scontrol.calls"\n[ "$1" = requeue ] && kill -KILL $$\nexit 0\n' "$TMP" >bin/scontrol
chmod +x bin/*
env PATH="$TMP/bin:$PATH" SLURM_JOB_ID=4701 SLURM_JOB_NODELIST="$(hostname)" SLURM_NTASKS=1 SLURM_JOB_NUM_NODES=1 \
    $T train --db "$DB" $M --max_steps 1000000 --print_freq 10 --checkpoint_every 1000 --name P >p.out 2>&1 &
lp=$!
if wait_step P 10 60; then
    kill -USR1 $lp
    wait $lp
    rc=$?
    pid=$(q "select id from runs where name = 'P'")
    s=$(cat "$CK/runs/$pid/LATEST" 2>/dev/null)
    [ $rc -eq 0 ] && [ -n "$s" ] && grep -q "preempted: preempted at step [0-9]*; the checkpoint of step $s is saved" p.out &&
        grep -q "^requeue 4701" scontrol.calls && ! grep -q "could not signal" p.out && ! grep -q "failed" p.out &&
        ok "SIGUSR1 under SLURM: preempted naming the checkpoint saved ($s), requeued, no false warning or error" ||
        fail "SIGUSR1 under SLURM" "exit $rc, LATEST $s: $(grep -v '^step' p.out | tail -n 6)"
else
    kill -9 $lp; wait $lp
    fail "SIGUSR1 under SLURM: no progress" "$(tail -n 5 p.out)"
fi

done_testing
