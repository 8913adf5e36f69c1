#!/usr/bin/env bash
# t4008: `terarec train --workers 4 --elastic 2` on this machine (mpirun), a
# worker killed again and again (kill -9 of rank 1's process):
# - each loss ends the attempt and the run goes on, re-planned, on the slots left
#   from the last committed checkpoint (an N -> M restore); the slot of the dead
#   worker rests and comes back at the next committed checkpoint (4 -> 3 -> 4);
#   the slot killed 3 times (--elastic_max_failures) is left out for the rest of
#   the run; a loss on 3 workers goes to 2 (MIN) and grows back to 3. Worlds in
#   order: 4, 3, 4, 3, 4, 3, 2, 3;
# - the run completes and trains the model an uninterrupted 4-worker run trains:
#   the same learning rate at every step (the schedule follows the step, not the
#   attempt), every step's mean loss within 1e-4 and the final AUC within 1e-4 of
#   it. Why these bounds: on this model (Adagrad, 4096 test samples) a change of
#   world alone moves a step's loss by under 1e-8 and the final AUC not at all
#   (2, 3 and 4 uninterrupted workers, measured when the test was written: the
#   all-to-all and the all-reduce sum in another order), and a restore is an exact
#   copy; a restore without its optimizer state, at another data position or with
#   another global batch moves them by far more (tried: see the report of issue
#   37). A report right after a restart from a step that is not a multiple of
#   --print_freq is the mean of fewer steps: it is left out of the comparison;
# - every resized event names the lost rank and its slot, the world before and
#   after, the step reached and the checkpoint restored (a committed one), the
#   steps trained again and the time lost with its phases; the console says each
#   change; `terarec runs show` lists the 8 attempts with their worlds;
# - MIN not reachable (--workers 2 --elastic 2, one killed): failed, saying so;
# - a model that no longer fits the workers left (ulimit -v): refused, naming what
#   it needs (not under AddressSanitizer, which maps terabytes);
# - a silent worker (SIGSTOP) is taken as lost after TR_ELASTIC_SILENT_S;
# - bad --elastic flags: exit 2 with one error line, nothing started.
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
PY=python3
use_mpi
cd "$TMP" || exit 1
DB=$TMP/hist/runs.db
M="--batch_size 256 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --optimizer adagrad --learning_rate 0.05 --warmup_steps 200 --decay_start_step 600
   --decay_steps 900 --threads 1 --synthetic_dataset_valid_batches 16 --print_freq 25 --checkpoint_every 50
   --max_steps 1200"
q() {
    $PY - "$DB" "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=30)
for r in c.execute(sys.argv[2]):
    print("|".join("" if v is None else str(v) for v in r))
PY
}

# ---- bad flags: one error, exit 2, no run ----------------------------------------------------------
bad() { # NAME REGEX ARGS...
    local name=$1 re=$2 out rc
    shift 2
    out=$(timeout 60 $T train --db "$DB" $M "$@" 2>&1 </dev/null)
    rc=$?
    if [ $rc -eq 2 ] && echo "$out" | grep -qE -- "$re" && [ "$(echo "$out" | grep -c 'error: ')" -eq 1 ]; then
        ok "$name: exit 2, one error"
    else
        fail "$name" "exit $rc: $out"
    fi
}
bad "--elastic 0" "--elastic '0' is not MIN\[:MAX\]" --workers 4 --elastic 0
bad "--elastic 3:2" "--elastic MAX 2 is less than MIN 3" --workers 4 --elastic 3:2
bad "--elastic 2n here" "--elastic 2n: nodes \(Nn\) are a SLURM allocation's" --workers 4 --elastic 2n
bad "--elastic 2:8 on 4 worker slots" "MAX 8 is not this run's --workers 4" --workers 4 --elastic 2:8
bad "--elastic 5 on 4 worker slots" "--elastic 5: MIN 5 workers needs 5 worker slots, and the run has 4" --workers 4 --elastic 5
bad "--elastic_grow_every without --elastic" "--elastic_grow_every needs --elastic" --workers 4 --elastic_grow_every 10
[ ! -e "$DB" ] || [ "$(q 'select count(*) from runs')" = 0 ] && ok "no run recorded for bad flags" ||
    fail "no run recorded for bad flags" "$(q 'select id, status from runs')"

# ---- the uninterrupted run --------------------------------------------------------------------------
$T train --db "$DB" --workers 4 $M --name ref >ref.out 2>&1 || fail "the uninterrupted run" "$(tail -n 5 ref.out)"

# ---- the elastic run, rank 1 killed 4 times ---------------------------------------------------------
t0=$(date +%s.%N)
$T train --db "$DB" --workers 4 --elastic 2 $M --name el >el.out 2>&1 &
lp=$!
# kill rank 1 when the current attempt has the world planned, has committed a
# checkpoint of its own and trained 20 steps past it; then wait for the next attempt
$PY - "$DB" 4,4,4,3 >kills.out 2>&1 <<'PY'
import os, signal, sqlite3, sys, time
db, plan = sys.argv[1], [int(w) for w in sys.argv[2].split(",")]
end = time.monotonic() + 240
def rows(sql, *a):
    while True:
        try:
            c = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=30)
            r = c.execute(sql, a).fetchall()
            c.close()
            return r
        except sqlite3.Error:
            time.sleep(0.05)
for k, want in enumerate(plan):
    while time.monotonic() < end:
        r = rows("SELECT p.attempt, count(*), min(p.start_time) FROM processes p JOIN runs r ON r.id = p.run"
                 " WHERE r.name = 'el' GROUP BY p.attempt ORDER BY p.attempt DESC LIMIT 1")
        if r and r[0][1] == want:
            a, _, t = r[0]
            c = rows("SELECT max(c.step) FROM checkpoints c JOIN runs r ON r.id = c.run WHERE r.name = 'el'"
                     " AND c.time > ?", t)
            s = rows("SELECT max(m.step) FROM metrics m JOIN runs r ON r.id = m.run WHERE r.name = 'el'"
                     " AND m.name = 'loss' AND m.time > ?", t)
            if c and c[0][0] is not None and s and s[0][0] is not None and s[0][0] >= c[0][0] + 20:
                pid = rows("SELECT p.pid FROM processes p JOIN runs r ON r.id = p.run WHERE r.name = 'el'"
                           " AND p.attempt = ? AND p.rank = 1", a)[0][0]
                os.kill(pid, signal.SIGKILL)
                print("kill %d: attempt %d (%d workers), step %d, pid %d, at %.6f" % (k + 1, a, want, s[0][0], pid, time.time()))
                break
        time.sleep(0.02)
    else:
        print("kill %d: no attempt of %d workers that trained" % (k + 1, want))
        sys.exit(1)
    while time.monotonic() < end and rows("SELECT max(p.attempt) FROM processes p JOIN runs r ON r.id = p.run"
                                          " WHERE r.name = 'el'")[0][0] == a:
        time.sleep(0.02)
PY
krc=$?
wait $lp
rc=$?
secs=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")
[ $krc -eq 0 ] && ok "rank 1 killed 4 times: $(grep -c '^kill' kills.out) kills" || fail "the kills" "$(cat kills.out)"
row=$(q "select status, reason is null from runs where name = 'el'")
[ $rc -eq 0 ] && [ "$row" = "completed|1" ] && ok "the elastic run completed (exit 0, $secs s)" ||
    fail "the elastic run completed" "exit $rc: $row: $(grep -E 'terarec|error' el.out | tail -n 12)"
worlds=$(q "select group_concat(workers, ',') from (select count(*) as workers from processes p join runs r
            on r.id = p.run where r.name = 'el' group by p.attempt order by p.attempt)")
[ "$worlds" = "4,3,4,3,4,3,2,3" ] && ok "its attempts' worlds: $worlds" || fail "the attempts' worlds" "$worlds (want 4,3,4,3,4,3,2,3)"
ev=$(q "select group_concat(json_extract(data, '$.why') || ':' || json_extract(data, '$.world_before') || '>' ||
        json_extract(data, '$.world'), ' ') from (select data from events e join runs r on r.id = e.run
        where r.name = 'el' and e.kind = 'resized' order by e.time)")
[ "$ev" = "lost:4>3 grow:3>4 lost:4>3 grow:3>4 lost:4>3 lost:3>2 grow:2>3" ] && ok "resized events: $ev" ||
    fail "resized events" "$ev"
# each loss: rank 1, its slot, how, the step reached, a committed checkpoint restored, the steps redone
bad_ev=$(q "select e.data from events e join runs r on r.id = e.run where r.name = 'el' and e.kind = 'resized'
            and json_extract(e.data, '$.why') = 'lost' and not (json_extract(e.data, '$.lost.rank') = 1
            and (json_extract(e.data, '$.lost.how') like 'was killed by signal 9%'
                 or json_extract(e.data, '$.lost.how') like 'was lost (its connection closed%')
            and json_extract(e.data, '$.from_step') in (select step from checkpoints c where c.run = r.id)
            and json_extract(e.data, '$.from_step') > 0
            and json_extract(e.data, '$.steps_redone') = json_extract(e.data, '$.step') - json_extract(e.data, '$.from_step')
            and json_extract(e.data, '$.time_lost_s') >= json_extract(e.data, '$.downtime_s')
            and json_extract(e.data, '$.phases.first_step_s') >= 0 and json_extract(e.data, '$.plan.fits'))")
slots=$(q "select group_concat(json_extract(data, '$.lost.slot') || '=' || json_extract(data, '$.lost.state'), ',') from
           (select data from events e join runs r on r.id = e.run where r.name = 'el' and e.kind = 'resized' and
           json_extract(data, '$.why') = 'lost' order by e.time)")
[ -z "$bad_ev" ] && [ "$slots" = "slot 1=resting,slot 1=resting,slot 1=left out,slot 2=resting" ] &&
    ok "each loss names rank 1 (killed by signal 9, or its connection lost: which mpirun names first), its slot ($slots), a committed checkpoint restored, the steps redone and the time lost" ||
    fail "the losses in the history" "$slots; $bad_ev"
# after each restart the first step trained is the one after the checkpoint restored
gaps=$(q "select count(*) from events e join runs r on r.id = e.run where r.name = 'el' and e.kind = 'restarted'
          and (select min(m.step) from metrics m where m.run = r.id and m.name = 'learning_rate' and m.time > e.time)
          <= json_extract(e.data, '$.from_step')")
[ "$gaps" = 0 ] && ok "every restart trains on from the checkpoint it restored" || fail "restarts train on" "$gaps restarts went back"
grep -qE "^terarec: elastic: rank 1 \(slot 1 on [^)]*\) (was killed by signal 9 \(Killed\)|was lost \(its connection closed without a goodbye\)) at step [0-9]*: the slot rests" el.out &&
    grep -q "^terarec: elastic: rank 1 (slot 1 on .*its workers died 3 times: left out for the rest of the run" el.out &&
    grep -q "^terarec: elastic: slot 1 usable again (the checkpoint of step [0-9]* is committed)" el.out &&
    grep -q "^terarec: elastic: 2 workers training from step [0-9]*, [0-9.]* s after the loss (detect " el.out &&
    ok "the console says each loss, the slot left out, the growth and the time to the first step" ||
    fail "the console" "$(grep elastic el.out)"
$T runs show el --db "$DB" >show.out 2>&1
att=$(sed -n '/^attempts:/,/^processes:/p' show.out | awk '$1 ~ /^[0-9]+$/ {printf "%s:%s ", $1, $2}')
[ "$att" = "0:4 1:3 2:4 3:3 4:4 5:3 6:2 7:3 " ] && grep -q 'resized (lost)' show.out &&
    ok "runs show lists the attempts with their worlds ($att)" || fail "runs show: the attempts" "$(sed -n '/^attempts:/,/^processes:/p' show.out)"
# the same model as the uninterrupted run
cmp=$(q "select count(*), sum(abs(e.value - f.value) > 1e-9), max(abs(e.value - f.value)) from metrics e
         join metrics f on f.step = e.step and f.name = e.name where e.name = 'learning_rate'
         and e.run = (select id from runs where name = 'el') and f.run = (select id from runs where name = 'ref')")
[ "${cmp%%|*}" -gt 40 ] && [ "$(echo "$cmp" | cut -d'|' -f2)" = 0 ] &&
    ok "the learning rate at each of $(echo "$cmp" | cut -d'|' -f1) steps is the uninterrupted run's" ||
    fail "the learning-rate schedule" "$cmp"
loss=$(q "select count(*), max(abs(e.value - f.value)) from metrics e join metrics f on f.step = e.step and f.name = e.name
          where e.name = 'loss' and e.run = (select id from runs where name = 'el')
          and f.run = (select id from runs where name = 'ref')
          and not exists (select 1 from events x where x.run = e.run and x.kind = 'restarted'
                          and json_extract(x.data, '$.from_step') % 25 <> 0 and e.time > x.time
                          and e.step - json_extract(x.data, '$.from_step') < 25)")
auc=$(q "select e.auc, f.auc, abs(e.auc - f.auc) from evals e, evals f where e.run = (select id from runs where name = 'el')
         and f.run = (select id from runs where name = 'ref') and e.step = 1200 and f.step = 1200")
awk -v d="${loss##*|}" 'BEGIN{exit !(d != "" && d <= 1e-4)}' && ok "each step's loss within 1e-4 of the uninterrupted run's (${loss%%|*} rows, at most ${loss##*|})" ||
    fail "the losses" "$loss"
awk -v d="${auc##*|}" 'BEGIN{exit !(d != "" && d <= 1e-4)}' && ok "the final AUC within 1e-4 of the uninterrupted run's ($auc)" ||
    fail "the final AUC" "el|ref|diff: $auc"
# where the time goes: said, not bounded (bench/ measures speed)
echo "# time from each loss to the first step on the new world (s):"
q "select json_extract(data, '$.why'), json_extract(data, '$.world_before') || '>' || json_extract(data, '$.world'),
   round(json_extract(data, '$.downtime_s'), 3), data from events e join runs r on r.id = e.run where r.name = 'el'
   and e.kind = 'resized' order by e.time" | sed -n 's/^\([a-z]*\)|\([0-9>]*\)|\([0-9.]*\)|.*"phases":\({[^}]*}\).*/#   \1 \2: \3 \4/p'

# ---- MIN not reachable ------------------------------------------------------------------------------
$T train --db "$DB" --workers 2 --elastic 2 $M --max_steps 100000 --name min >min.out 2>&1 &
lp=$!
for _ in $(seq 300); do
    [ -n "$(q "select max(m.step) >= 50 from metrics m join runs r on r.id = m.run where r.name = 'min'" | grep 1)" ] && break
    sleep 0.1
done
pid=$(q "select p.pid from processes p join runs r on r.id = p.run where r.name = 'min' and p.rank = 1")
[ -n "$pid" ] && kill -9 "$pid"
wait $lp
rc=$?
row=$(q "select status, reason from runs where name = 'min'")
[ $rc -eq 1 ] && echo "$row" | grep -qE '^failed\|elastic: 1 of the run.s 2 worker slots usable \(slot 1 resting\); --elastic 2 needs 2 workers: stopped at step [0-9]+' &&
    [ "$(q "select count(*) from events e join runs r on r.id = e.run where r.name = 'min' and e.kind = 'elastic_stop'")" = 1 ] &&
    ok "MIN not reachable: failed, saying so ($row)" || fail "MIN not reachable" "exit $rc: $row $(tail -n 4 min.out)"

# ---- a silent worker (SIGSTOP) is taken as lost --------------------------------------------------------
TR_ELASTIC_SILENT_S=4 $T train --db "$DB" --workers 3 --elastic 2 $M --max_steps 100000 --name stop >stop.out 2>&1 &
lp=$!
for _ in $(seq 300); do
    [ -n "$(q "select max(m.step) >= 50 from metrics m join runs r on r.id = m.run where r.name = 'stop'" | grep 1)" ] && break
    sleep 0.1
done
pid=$(q "select p.pid from processes p join runs r on r.id = p.run where r.name = 'stop' and p.rank = 2")
[ -n "$pid" ] && kill -STOP "$pid"
got=""
for _ in $(seq 300); do
    got=$(q "select json_extract(e.data, '$.lost.rank') || ':' || json_extract(e.data, '$.lost.how') || ':' ||
             json_extract(e.data, '$.world') from events e join runs r on r.id = e.run where r.name = 'stop' and e.kind = 'resized'")
    [ -n "$got" ] && break
    sleep 0.1
done
kill -INT $lp
wait $lp
# (gone, or a zombie its parent's death left to a PID 1 that does not reap)
if [ -n "$pid" ] && [ -e "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]; then
    fail "the stopped worker is gone" "$(cat "/proc/$pid/status" 2>/dev/null | head -n 3)"
    kill -9 "$pid"
fi
[ "$got" = "2:stopped beating (silent for 4 s):2" ] && grep -q "rank 2 on .* has not beaten for [0-9] s: taken as lost" stop.out &&
    ok "a stopped worker, silent for 4 s, is taken as lost: the run goes on with 2 ($got)" ||
    fail "a silent worker" "'$got' $(grep elastic stop.out)"

# ---- the model no longer fits the workers left ---------------------------------------------------------
if ldd "$TR_BIN/terarec-worker" | grep -q libasan; then
    skip "a model that does not fit the workers left" "AddressSanitizer reserves terabytes of address space: no ulimit -v"
else
    # 26 x 400000 x 16 floats and their checkpoint staging: 1.24 GiB on one worker, 0.7 GiB on each of
    # two (terarec plan); under ulimit -v 1.5 GiB two fit (a worker maps about 0.3 GiB before it
    # allocates) and one would not
    BIG="--batch_size 256 --synthetic_dataset_cardinalities 26x400000 --embedding_dim 16 --bottom_mlp_dims 16,16
         --top_mlp_dims 16,1 --threads 1 --synthetic_dataset_valid_batches 1 --print_freq 5 --max_steps 100000"
    (ulimit -v 1572864; exec $T train --db "$DB" --workers 2 --elastic 1 $BIG --name big) >big.out 2>&1 &
    lp=$!
    for _ in $(seq 600); do
        [ -n "$(q "select max(m.step) >= 5 from metrics m join runs r on r.id = m.run where r.name = 'big'" | grep 1)" ] && break
        kill -0 $lp 2>/dev/null || break
        sleep 0.1
    done
    pid=$(q "select p.pid from processes p join runs r on r.id = p.run where r.name = 'big' and p.rank = 1")
    [ -n "$pid" ] && kill -9 "$pid"
    wait $lp
    rc=$?
    row=$(q "select status, reason from runs where name = 'big'")
    [ $rc -eq 1 ] && echo "$row" | grep -q '^failed|elastic: the model no longer fits on the 1 worker left: it needs at least 2' &&
        grep -qE "error: memory: rank 0 \(host [^)]*\) needs .* its ulimit -v has .* left" big.out &&
        grep -q "error: elastic: the model no longer fits on 1 worker: it needs at least 2" big.out &&
        ok "a model that does not fit the one worker left: refused, naming what it needs" ||
        fail "a model that does not fit" "exit $rc: $row $(grep -E 'error|hint|elastic' big.out | tail -n 6)"
fi

done_testing
