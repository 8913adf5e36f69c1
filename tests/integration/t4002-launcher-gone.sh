#!/usr/bin/env bash
# t4002: the launcher gone never leaves its programs running (issue 32, item 5).
# A real `terarec train` (2 workers under mpirun, the loader, a store of its own):
# - kill -9 of the launcher: within 10 s no worker, mpirun, loader or store of this
#   test is left, the workers' log says why, and no checkpoint file is written
#   afterwards;
# - `terarec train | head -1`: the closed pipe does not kill the launcher; the run
#   goes on without progress lines and completes, recorded;
# - SIGHUP (the terminal closed): the run is cancelled after a checkpoint, recorded,
#   and nothing of it is left.
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
use_mpi
cd "$TMP" || exit 1
DB=$TMP/hist/runs.db
M="--batch_size 256 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --threads 1 --synthetic_dataset_valid_batches 2"
KIDS='terarec-worker|terarec-loader|terarec-ckpt|mpirun'
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
gone_within() { # SECS: until none of this test's children is left; sets $secs
    local t0 i
    t0=$(date +%s.%N)
    for i in $(seq 1 $(($1 * 10))); do
        [ -z "$(own_pids "$KIDS")" ] && break
        sleep 0.1
    done
    secs=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")
    [ -z "$(own_pids "$KIDS")" ]
}
ckpt_files() { find "$TMP/hist/checkpoints" -type f -printf '%p %s\n' 2>/dev/null | sort; }

# ---- kill -9 of the launcher ----------------------------------------------------------------------
$T train --db "$DB" --workers 2 $M --max_steps 1000000 --print_freq 10 --checkpoint_every 20 --name k9 \
    >k9.out 2>&1 &
lp=$!
if wait_step k9 60 60; then
    before=$(own_pids "$KIDS" | wc -l)
    kill -9 $lp
    wait $lp 2>/dev/null
    if [ "$before" -ge 4 ] && gone_within 10; then
        ok "kill -9 of the launcher: its $before programs (mpirun, 2 workers, loader, store) ended in $secs s"
    else
        fail "kill -9 of the launcher: its programs end" "before: $before; left after $secs s: $(own_pids "$KIDS" |
            xargs -r ps -o pid=,args= -p | cut -c1-120)"
        own_pids "$KIDS" | xargs -r kill -9
    fi
    log=$(ls "$TMP"/hist/runs/*/workers.log 2>/dev/null | head -n 1)
    grep -q "error: the launcher at 'tcp:127.0.0.1:[0-9]*' is gone (its connection closed): this worker ends" "$log" &&
        ok "the workers' log says the launcher is gone" || fail "the workers' log says why" "$(tail -n 5 "$log")"
    a=$(ckpt_files)
    sleep 3
    b=$(ckpt_files)
    [ -n "$a" ] && [ "$a" = "$b" ] && ok "no checkpoint file written after the end ($(echo "$a" | wc -l) files)" ||
        fail "no checkpoint file written after the end" "$(diff <(echo "$a") <(echo "$b") | head -n 5)"
else
    kill -9 $lp; wait $lp
    fail "kill -9: the run made no progress" "$(tail -n 5 k9.out)"
    own_pids "$KIDS" | xargs -r kill -9
fi

# ---- terarec train | head -1 ----------------------------------------------------------------------
$T train --db "$DB" --workers 2 $M --max_steps 600 --print_freq 10 --name head 2>head.err | head -n 1 >head.out
rcs=("${PIPESTATUS[@]}")
row=$(q "select status, (select max(step) from metrics m where m.run = runs.id) from runs where name = 'head'")
[ "${rcs[0]}" -eq 0 ] && [ "$row" = "completed|600" ] && grep -q '^terarec: ' head.out &&
    ok "| head -1: the launcher lives on, the run completes (exit ${rcs[0]}: $row)" ||
    fail "| head -1: the run completes" "exit ${rcs[*]}: $row; $(tail -n 4 head.err)"
grep -q 'stdout is closed' head.err && ok "| head -1: says once that stdout is closed" ||
    fail "| head -1: says stdout is closed" "$(tail -n 4 head.err)"
gone_within 10 && ok "| head -1: nothing of the run is left" || fail "| head -1: nothing left" "$(own_pids "$KIDS")"

# ---- SIGHUP: cancelled ----------------------------------------------------------------------------
$T train --db "$DB" --workers 2 $M --max_steps 1000000 --print_freq 10 --name hup >hup.out 2>&1 &
lp=$!
if wait_step hup 20 60; then
    kill -HUP $lp
    wait $lp
    rc=$?
    row=$(q "select r.status, count(c.step) from runs r left join checkpoints c on c.run = r.id where r.name = 'hup'")
    [ $rc -eq 130 ] && [ "$row" = "cancelled|1" ] && ok "SIGHUP: cancelled with a checkpoint (exit 130)" ||
        fail "SIGHUP" "exit $rc: $row $(tail -n 4 hup.out)"
    gone_within 10 && ok "SIGHUP: nothing of the run is left" || fail "SIGHUP: nothing left" "$(own_pids "$KIDS")"
else
    kill -9 $lp; wait $lp
    fail "SIGHUP: no progress" "$(tail -n 5 hup.out)"
fi

done_testing
