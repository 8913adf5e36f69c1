#!/usr/bin/env bash
# t4001: `terarec train` on this machine: the launcher starts the checkpoint store,
# the loader and the workers (mpirun), records the run in a real SQLite file, and ends
# it with the right status:
# - 2 workers complete: the run row, metrics, evaluations, checkpoints and processes;
#   plain progress lines (stdout is not a terminal) and --json lines;
# - no arguments: the built-in demo, and the line saying where the history went;
# - bad input (an unwritable or newer database, an unknown run, flags the worker would
#   refuse) exits 2 with one line before anything starts (no run row);
# - kill -9 of one worker: failed, naming the rank and the host, within 10 s; with
#   --max_restarts 1 it resumes from the last checkpoint and completes (rank 1, and
#   rank 0, whose death also ends the loader that feeds it); rank 0 killed between its
#   commit of a checkpoint and its line saying so: the history has it from the store;
# - a worker stopped with SIGSTOP: hung within --hang_timeout + 5 s, naming the silent rank;
# - Ctrl-C (SIGINT) to the launcher: cancelled after a checkpoint;
# - --resume RUN continues a finished run in a new row;
# - 10 launchers at once on one database: 10 complete runs.
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
use_mpi
cd "$TMP" || exit 1
DB=$TMP/hist/runs.db
M="--batch_size 256 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --threads 1 --synthetic_dataset_valid_batches 2"
# q SQL: the rows of a query on $DB, columns separated by |
q() {
    python3 - "$DB" "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
for r in c.execute(sys.argv[2]):
    print("|".join("" if v is None else str(v) for v in r))
PY
}
# wait_step NAME STEP [SECS]: until run NAME has a metric at or past STEP
wait_step() {
    local i s
    for i in $(seq 1 $((${3:-60} * 10))); do
        s=$(q "select max(m.step) from metrics m join runs r on r.id = m.run where r.name = '$1'" 2>/dev/null)
        [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0
        sleep 0.1
    done
    return 1
}
rank_pid() { q "select p.pid from processes p join runs r on r.id = p.run where r.name = '$1' and p.rank = $2
                order by p.attempt desc limit 1"; }

# ---- two workers, to the end -------------------------------------------------------------------
$T train --db "$DB" --workers 2 $M --max_steps 40 --print_freq 10 --name two >two.out 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "^run history: $DB (terarec runs show " two.out &&
    ok "2 workers: exit 0, the history's path printed" || fail "2 workers complete" "exit $rc: $(tail -n 8 two.out)"
grep -q '^step 40/40 ' two.out && grep -q '^step 10/40 ' two.out &&
    ok "progress: one plain line per report (stdout is not a terminal)" || fail "progress lines" "$(head -n 8 two.out)"
row=$(q "select status, workers, nodes, hosts, git_hash is not null, cmdline like 'terarec train %',
         json_extract(config, '$.embedding_dim'), end_time > start_time from runs where name = 'two'")
[ "$row" = "completed|2|1|$(hostname)|1|1|8|1" ] && ok "the run row: $row" || fail "the run row" "$row"
[ "$(q "select group_concat(step) from (select step from metrics m join runs r on r.id = m.run
       where r.name = 'two' and m.name = 'loss' order by step)")" = "10,20,30,40" ] &&
    ok "loss recorded at steps 10, 20, 30, 40" || fail "loss metrics" "$(q 'select * from metrics limit 8')"
[ "$(q "select count(*) from metrics m join runs r on r.id = m.run where r.name = 'two' and m.name = 'samples_per_s'
       and m.value > 0")" = 4 ] && ok "samples/s recorded" || fail "samples/s" "$(q 'select name from metrics' | sort -u)"
[ "$(q "select count(*), min(auc) > 0.3 from evals e join runs r on r.id = e.run where r.name = 'two'")" = "1|1" ] &&
    ok "the evaluation recorded" || fail "evals" "$(q 'select * from evals')"
[ "$(q "select step, manifest_url like '%/runs/%/manifests/40.json', bytes > 0 from checkpoints c join runs r on
       r.id = c.run where r.name = 'two'")" = "40|1|1" ] && ok "the final checkpoint recorded" ||
    fail "checkpoints" "$(q 'select * from checkpoints')"
[ "$(q "select group_concat(rank || ':' || exit_code) from (select rank, exit_code from processes p join runs r on
       r.id = p.run where r.name = 'two' order by rank)")" = "0:0,1:0" ] && ok "processes: 2 ranks, exit 0" ||
    fail "processes" "$(q 'select * from processes')"

# ---- --json --------------------------------------------------------------------------------------
# (one worker, no mpirun: in a sanitizer build the leak check stays on for the launcher)
ASAN_OPTIONS=${ASAN_OPTIONS%:detect_leaks=0} $T train --db "$DB" $M --max_steps 20 --print_freq 10 --json \
    >json.out 2>json.err
rc=$?
types=$(python3 -c '
import json, sys
print(",".join(json.loads(l)["type"] for l in open(sys.argv[1])))' json.out 2>&1)
[ $rc -eq 0 ] && [ "$types" = "start,step,step,eval,checkpoint,end" ] && grep -q '"status": *"completed"' json.out &&
    ok "--json: $types" || fail "--json" "exit $rc: $types $(tail -n 3 json.err)"

# ---- no arguments: the demo ----------------------------------------------------------------------
TR_DB=$TMP/demo/runs.db timeout 300 $T train >demo.out 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q "^terarec: the built-in demo (no model or data flags): 300 steps of 2048" demo.out && grep -q "^step 300/300 " demo.out &&
    grep -q "^run history: $TMP/demo/runs.db " demo.out && ok "terarec train with no arguments: the demo, 300 steps" ||
    fail "terarec train with no arguments" "exit $rc: $(tail -n 6 demo.out)"

# ---- bad input: one line, exit 2, no run row -------------------------------------------------------
n0=$(q "select count(*) from runs")
bad() { # NAME REGEX ARGS...
    local name=$1 re=$2; shift 2
    local out rc
    out=$(timeout 60 $T train "$@" 2>&1 </dev/null)
    rc=$?
    if [ $rc -eq 2 ] && echo "$out" | grep -qE -- "$re" && [ "$(echo "$out" | grep -c 'error: ')" -eq 1 ]; then
        ok "$name: exit 2, one error"
    else
        fail "$name" "exit $rc: $out"
    fi
}
bad "an unwritable database" "error: .*/proc/terarec-nope" --db /proc/terarec-nope/runs.db $M --max_steps 2
cp "$DB" newer.db && python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute("pragma user_version = 99"); c.commit()' newer.db
bad "a database from a newer schema" "newer.db.*99" --db newer.db $M --max_steps 2
bad "--resume of an unknown run" "no run 'no-such-run'" --db "$DB" $M --resume no-such-run
bad "a top MLP that does not end in 1" "top_mlp_dims" --db "$DB" $M --top_mlp_dims 16,2
bad "--workers 0" "--workers" --db "$DB" $M --workers 0
bad "a dataset directory that does not exist" "--dataset_path $TMP/nope" --db "$DB" --dataset_type split_binary \
    --dataset_path "$TMP/nope"
[ "$(q "select count(*) from runs")" = "$n0" ] && ok "no run row for bad input" || fail "no run row for bad input"

# ---- kill -9 of one worker: failed within 10 s, naming rank and host ------------------------------------
$T train --db "$DB" --workers 2 $M --max_steps 1000000 --print_freq 10 --name kill >kill.out 2>&1 &
lp=$!
if wait_step kill 30; then
    pid=$(rank_pid kill 1)
    t0=$(date +%s.%N)
    kill -9 "$pid"
    wait $lp
    rc=$?
    t1=$(date +%s.%N)
    row=$(q "select status, reason from runs where name = 'kill'")
    secs=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")
    [ $rc -eq 1 ] && echo "$row" | grep -qE "^failed\|rank 1 on $(hostname) was killed by signal 9" &&
        awk "BEGIN{exit !($secs <= 10)}" && ok "kill -9 of rank 1: failed in $secs s: $row" ||
        fail "kill -9 of rank 1" "exit $rc after $secs s: $row $(tail -n 5 kill.out)"
else
    kill $lp; wait $lp
    fail "kill -9: the run made no progress" "$(tail -n 5 kill.out)"
fi

# ---- ... and with --max_restarts 1 it completes -----------------------------------------------------------
# (1000 steps: at about 300 steps a second, 400 could end between seeing step 120 and
# the kill, which then found no process; 1000 leave it nearly 3 s, and the sanitized
# pass, 8 times slower, more). Rank 0 too: the loader feeds it, sees it
# gone and ends with an error of its own, which is the workers' failure (restarted),
# not the loader's (not restarted: its input would fail again)
restart_case() { # RANK
    local name=restart$1 rc row ev
    $T train --db "$DB" --workers 2 $M --max_steps 1000 --print_freq 10 --checkpoint_every 50 --max_restarts 1 \
        --name $name >$name.out 2>&1 &
    lp=$!
    if wait_step $name 120; then
        kill -9 "$(rank_pid $name $1)"
        wait $lp
        rc=$?
        row=$(q "select status, restarts from runs where name = '$name'")
        ev=$(q "select group_concat(kind) from events e join runs r on r.id = e.run where r.name = '$name'")
        [ $rc -eq 0 ] && [ "$row" = "completed|1" ] && echo "$ev" | grep -q 'failed_attempt,restarted' &&
            [ "$(q "select max(step) from metrics m join runs r on r.id = m.run where r.name = '$name'")" = 1000 ] &&
            ok "--max_restarts 1, rank $1 killed: restarted from the checkpoint and completed ($ev)" ||
            fail "--max_restarts 1, rank $1 killed" "exit $rc: $row; $ev; $(tail -n 5 $name.out)"
    else
        kill $lp; wait $lp
        fail "--max_restarts: no progress" "$(tail -n 5 $name.out)"
    fi
}
restart_case 1
restart_case 0

# ---- a checkpoint committed but never reported: the history has it all the same ------------------------
# rank 0 commits step 100 to a store it writes itself (--checkpoint_dir DIR) and dies at
# once (kill_after_latest.so), before its line saying so: the launcher reads the
# store's LATEST as the attempt ends and records that checkpoint, with its manifest's
# bytes, and the restart continues from it
P=$TR_BUILD/tests/lib/kill_after_latest.so
if [ -f "$P" ]; then
    LD_PRELOAD=$P TR_TEST_KILL_AFTER_LATEST=100 \
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
        $T train --db "$DB" --workers 2 $M --max_steps 300 --print_freq 10 --checkpoint_every 50 --max_restarts 1 \
        --checkpoint_dir "$TMP/ck-late" --name late </dev/null >late.out 2>&1
    rc=$?
    ck=$(q "select group_concat(step || ':' || (bytes > 0), ',') from (select step, bytes from checkpoints c join
            runs r on r.id = c.run where r.name = 'late' order by step)")
    from=$(q "select json_extract(data, '$.from_step') from events e join runs r on r.id = e.run
              where r.name = 'late' and e.kind = 'restarted'")
    wlog=$TMP/hist/runs/$(q "select id from runs where name = 'late'")/workers.log
    if [ $rc -eq 0 ] && grep -q "kill_after_latest: step 100 committed" "$wlog" && [ "$from" = 100 ] &&
        [ "$ck" = "50:1,100:1,150:1,200:1,250:1,300:1" ] &&
        grep -q "checkpoint: step 100 committed .*read from the store" late.out; then
        ok "rank 0 killed right after its commit of step 100: the history has it from the store ($ck), the restart continued from it"
    else
        fail "a checkpoint committed but not reported" "exit $rc; from $from; checkpoints $ck; $(grep -E 'kill_after|checkpoint: step 100|terarec:' late.out | tail -n 5)"
    fi
else
    fail "a checkpoint committed but not reported" "no $P (make builds it)"
fi

# ---- SIGSTOP: hung within --hang_timeout + 5 s ---------------------------------------------------------
$T train --db "$DB" --workers 2 $M --max_steps 1000000 --print_freq 10 --hang_timeout 5 --name hang >hang.out 2>&1 &
lp=$!
if wait_step hang 30; then
    pid=$(rank_pid hang 1)
    t0=$(date +%s.%N)
    kill -STOP "$pid"
    wait $lp
    rc=$?
    secs=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")
    row=$(q "select status, reason from runs where name = 'hang'")
    [ $rc -eq 1 ] && echo "$row" | grep -qE "^hung\|no training step for 5 s after step [0-9]+; silent ranks: 1 \($(hostname)\)" &&
        awk "BEGIN{exit !($secs <= 10)}" && ok "SIGSTOP: hung in $secs s: $row" ||
        fail "SIGSTOP: hung" "exit $rc after $secs s: $row"
    # the launcher's SIGKILL is sent before it exits, but the process ends (its memory
    # freed, then reaped as a zombie by mpirun or init) a moment later: gone or a
    # zombie within 5 s; a worker left stopped ('T') fails
    st=
    for _ in $(seq 50); do
        st=$(ps -o stat= -p "$pid" 2>/dev/null | tr -d ' ')
        case "$st" in "" | Z*) break ;; esac
        sleep 0.1
    done
    case "$st" in
    "" | Z*) ok "the stopped worker was killed" ;;
    *) fail "the stopped worker is still there" "pid $pid state $st 5 s after the launcher's exit" ;;
    esac
else
    kill $lp; wait $lp
    fail "hang: no progress" "$(tail -n 5 hang.out)"
fi

# ---- Ctrl-C: cancelled, after a checkpoint ------------------------------------------------------------------
$T train --db "$DB" --workers 2 $M --max_steps 1000000 --print_freq 10 --name int >int.out 2>&1 &
lp=$!
if wait_step int 20; then
    kill -INT $lp
    wait $lp
    rc=$?
    row=$(q "select r.status, count(c.step) from runs r left join checkpoints c on c.run = r.id where r.name = 'int'")
    [ $rc -eq 130 ] && [ "$row" = "cancelled|1" ] && ok "SIGINT: cancelled with a checkpoint (exit 130)" ||
        fail "SIGINT" "exit $rc: $row $(tail -n 4 int.out)"
else
    kill -9 $lp; wait $lp
    fail "SIGINT: no progress" "$(tail -n 5 int.out)"
fi

# ---- --resume RUN: a new row that continues 'two' from its step 40 ----------------------------------------
$T train --db "$DB" --workers 2 $M --max_steps 60 --print_freq 10 --resume two --name two-more >more.out 2>&1
rc=$?
row=$(q "select r.status, r.resumed_from = (select id from runs where name = 'two'),
         (select group_concat(step) from metrics m where m.run = r.id and m.name = 'loss') from runs r
         where r.name = 'two-more'")
[ $rc -eq 0 ] && [ "$row" = "completed|1|50,60" ] && ok "--resume two: steps 41-60 in a new row" ||
    fail "--resume" "exit $rc: $row $(tail -n 5 more.out)"

# ---- 10 launchers at once on one database ------------------------------------------------------------------
pids=()
for i in $(seq 1 10); do
    $T train --db "$DB" $M --max_steps 10 --print_freq 5 --checkpoint_dir "$TMP/ck10" --name "many$i" \
        >"many$i.out" 2>&1 &
    pids+=($!)
done
bad10=0
for p in "${pids[@]}"; do wait "$p" || bad10=$((bad10 + 1)); done
row=$(q "select count(*), sum(status = 'completed'), (select count(*) from metrics m join runs r on r.id = m.run
         where r.name like 'many%' and m.name = 'loss') from runs where name like 'many%'")
[ $bad10 -eq 0 ] && [ "$row" = "10|10|20" ] && ok "10 launchers at once: 10 complete runs, 20 loss rows" ||
    fail "10 launchers at once" "$bad10 failed; $row; $(tail -n 3 many1.out)"

# ---- --run_name, the workers' flag's name (--name is its older spelling) ---------------------------------
out=$($T train --help 2>&1)
echo "$out" | grep -q -- '--run_name TEXT .*(alias --name)' && echo "$out" | grep -q -- '--resume TEXT ' &&
    ! echo "$out" | grep -qE -- '--(loader|events_addr|events_token_file) ' &&
    ok "train --help: --run_name (alias --name), --resume RUN, not the flags it sets on its workers" ||
    fail "train --help" "$(echo "$out" | grep -E -- '--(run_name|name|resume|loader|events_addr) ')"
$T train --db "$DB" $M --max_steps 10 --print_freq 5 --run_name spelled >spelled.out 2>&1
rc=$?
row=$(q "select status, json_extract(config, '$.run_name') from runs where name = 'spelled'")
[ $rc -eq 0 ] && [ "$row" = "completed|spelled" ] && ok "--run_name names the run in the history: $row" ||
    fail "--run_name" "exit $rc: $row $(tail -n 3 spelled.out)"

done_testing
