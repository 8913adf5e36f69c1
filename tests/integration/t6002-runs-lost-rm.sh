#!/usr/bin/env bash
# t6002: runs whose launcher vanished, and `runs rm --checkpoints`, on histories
# written by real `terarec train` runs:
# - a launcher beats (its run's heartbeat moves on while it runs);
# - a launcher killed with SIGKILL mid-run leaves its run `running` in the file;
#   the next open shows it `lost` with the launcher's pid and host, its last step
#   and last checkpoint (list --status lost, show, show --json and its `lost`
#   event); a read-only copy (a tmpfs remounted read-only) shows it lost without
#   recording it (list, show, serve), a writable open records it;
# - rm --checkpoints removes ROOT/runs/<ckpt_run>/ of a run's store, refuses (exit
#   2, nothing removed) while another run shares that checkpoint run (a run
#   resumed from it in a history from before resumed runs had their own), and
#   removes both when both are named; a store behind an http URL and a
#   running run are refused with a hint.
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
PY=/usr/bin/python3
use_mpi
cd "$TMP" || exit 1
DB=$TMP/hist/runs.db
CK=$TMP/hist/checkpoints
M="--batch_size 256 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --threads 1 --synthetic_dataset_valid_batches 2"
MNT=$TMP/ro
cleanup() {
    mountpoint -q "$MNT" 2>/dev/null && umount "$MNT"
    for p in $(own_pids 'terarec' 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
sql() { # SQL [DB [URI-QUERY]]: the first column of the first row
    $PY -c "import sqlite3,sys; r=sqlite3.connect('file:'+sys.argv[1]+'?'+sys.argv[3], uri=True).execute(sys.argv[2]).fetchone(); print('' if r is None or r[0] is None else r[0])" "${2:-$DB}" "$1" "${3:-mode=ro}"
}

# ---- a launcher killed with SIGKILL ---------------------------------------------------------------------
$T train --db "$DB" --workers 1 $M --max_steps 100000 --print_freq 5 --checkpoint_every 20 --name killed \
    >killed.out 2>&1 &
LPID=$!
RID="" step=0 ck=""
for _ in $(seq 900); do
    sleep 0.1
    kill -0 "$LPID" 2>/dev/null || break
    [ -f "$DB" ] || continue
    RID=$(sql "SELECT id FROM runs WHERE name = 'killed'" 2>/dev/null)
    [ -n "$RID" ] || continue
    step=$(sql "SELECT coalesce(max(step), 0) FROM metrics WHERE run = '$RID'" 2>/dev/null)
    ck=$(sql "SELECT max(step) FROM checkpoints WHERE run = '$RID'" 2>/dev/null)
    beat=$(sql "SELECT heartbeat > start_time + 5 FROM runs WHERE id = '$RID'" 2>/dev/null)
    [ -n "$ck" ] && [ "${step:-0}" -ge 25 ] && [ "$beat" = 1 ] && break
done
if [ -z "$RID" ] || [ -z "$ck" ] || ! kill -0 "$LPID" 2>/dev/null; then
    fail "a training run gets past a checkpoint" "$(tail -n 5 killed.out)"
    done_testing
fi
[ "$beat" = 1 ] && ok "the launcher beats (heartbeat after its start)" ||
    fail "the launcher beats (heartbeat after its start)" "$(sql "SELECT start_time, heartbeat FROM runs WHERE id = '$RID'")"
kill -9 "$LPID"
wait "$LPID" 2>/dev/null
# what the launcher started would outlive it here (another part of the launcher
# ends them): the test ends them, so that nothing writes after this point
for p in $(own_pids 'terarec' 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
sleep 0.5
step=$(sql "SELECT max(step) FROM metrics WHERE run = '$RID'")
ck=$(sql "SELECT step FROM checkpoints WHERE run = '$RID' ORDER BY step DESC, rowid DESC LIMIT 1")
ckurl=$(sql "SELECT manifest_url FROM checkpoints WHERE run = '$RID' ORDER BY step DESC, rowid DESC LIMIT 1")
[ "$(sql "SELECT status FROM runs WHERE id = '$RID'")" = running ] &&
    ok "killed at step $step (checkpoint $ck): the file still says running" ||
    fail "killed at step $step (checkpoint $ck): the file still says running"
want="the launcher (pid $LPID on $(hostname)) ended without recording an end; last step $step, last checkpoint step $ck ($ckurl)"

# a read-only copy shows it lost and records nothing
if mkdir -p "$MNT" && mount -t tmpfs -o size=64m tmpfs "$MNT" 2>/dev/null; then
    $PY -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close()" \
        "$DB" "$MNT/runs.db"
    mount -o remount,ro "$MNT"
    out=$($T runs list --db "$MNT/runs.db" --status lost 2>&1)
    if echo "$out" | grep -q "^$RID .*killed .*lost"; then
        ok "a read-only copy: list --status lost shows it"
    else
        fail "a read-only copy: list --status lost shows it" "$out"
    fi
    check "a read-only copy: show --json has the reason" bash -c "$T runs show $RID --json --db '$MNT/runs.db' |
        $PY -c 'import json,sys; r=json.load(sys.stdin)[\"run\"]; assert r[\"status\"]==\"lost\", r[\"status\"];
assert r[\"reason\"]==sys.argv[1], r[\"reason\"]' '$want'"
    $T runs serve --db "$MNT/runs.db" --listen 127.0.0.1:0 >serve.out 2>serve.err &
    spid=$!
    url=""
    for _ in $(seq 100); do
        url=$(sed -n 's|^terarec runs serve: \(http://[^ ]*\)/ .*|\1|p' serve.out)
        [ -n "$url" ] && break
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    check "a read-only copy: serve's /api/runs/ID says lost, and /api/runs?status=lost lists it" bash -c "
        curl -sf '$url/api/runs/$RID' | $PY -c 'import json,sys; r=json.load(sys.stdin)[\"run\"]; assert r[\"status\"]==\"lost\", r' &&
        curl -sf '$url/api/runs?status=lost' | $PY -c 'import json,sys; a=json.load(sys.stdin); assert [r[\"id\"] for r in a]==[\"$RID\"], a'"
    kill "$spid"
    wait "$spid" 2>/dev/null
    [ "$(sql "SELECT status FROM runs WHERE id = '$RID'" "$MNT/runs.db" "mode=ro&immutable=1")" = running ] &&
        ok "a read-only copy: nothing recorded" || fail "a read-only copy: nothing recorded"
    umount "$MNT"
else
    skip "a read-only copy shows it lost" "cannot mount a tmpfs here"
fi

out=$($T runs list --db "$DB" 2>&1)
if echo "$out" | grep -q "^$RID .*killed .*lost .* $step "; then
    ok "list: lost, with its step"
else
    fail "list: lost, with its step" "$out"
fi
out=$($T runs show killed --db "$DB" 2>&1)
if echo "$out" | grep -q "^  status  *lost$" && echo "$out" | grep -qF "  reason         $want" &&
    echo "$out" | grep -q "launcher_pid  *$LPID$"; then
    ok "show: lost, the launcher, last step and checkpoint"
else
    fail "show: lost, the launcher, last step and checkpoint" "$(echo "$out" | head -30)"
fi
[ "$(sql "SELECT status FROM runs WHERE id = '$RID'")" = lost ] &&
    [ "$(sql "SELECT count(*) FROM events WHERE run = '$RID' AND kind = 'lost'")" = 1 ] &&
    [ -n "$(sql "SELECT end_time FROM runs WHERE id = '$RID'")" ] &&
    ok "recorded in the file: status, end time, one lost event" || fail "recorded in the file: status, end time, one lost event"
$T runs list --db "$DB" >/dev/null 2>&1
[ "$(sql "SELECT count(*) FROM events WHERE run = '$RID' AND kind = 'lost'")" = 1 ] &&
    ok "a second open records nothing more" || fail "a second open records nothing more"

# ---- rm --checkpoints --------------------------------------------------------------------------------------
if ! $T train --db "$DB" --workers 1 $M --max_steps 40 --print_freq 5 --checkpoint_every 20 --name first \
    >first.out 2>&1 ||
    ! $T train --db "$DB" --workers 1 $M --max_steps 60 --print_freq 5 --checkpoint_every 20 --name second \
        --resume first >second.out 2>&1; then
    fail "a run and one resumed from it" "$(tail -n 5 first.out second.out)"
    done_testing
fi
A=$(sql "SELECT id FROM runs WHERE name = 'first'")
B=$(sql "SELECT id FROM runs WHERE name = 'second'")
[ "$(sql "SELECT ckpt_run FROM runs WHERE id = '$B'")" = "$B" ] && [ -d "$CK/runs/$A/manifests" ] &&
    [ -d "$CK/runs/$B/manifests" ] && [ -d "$CK/runs/$RID" ] &&
    ok "a run resumed from another saves under a checkpoint run of its own" ||
    fail "a run resumed from another saves under a checkpoint run of its own" "$(ls "$CK/runs")"
# a history written before that: the resumed run's row names the first's checkpoint run
$PY -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(sys.argv[2]); c.commit()" "$DB" \
    "UPDATE runs SET ckpt_run = '$A' WHERE id = '$B'"

out=$($T runs rm first --checkpoints --db "$DB" 2>&1)
rc=$?
if [ $rc -eq 2 ] && echo "$out" | grep 'error:' | grep -q "shares its checkpoints .* with run $B" &&
    echo "$out" | grep -q "hint:" && [ -d "$CK/runs/$A" ] && [ "$(sql "SELECT count(*) FROM runs WHERE id = '$A'")" = 1 ]
then
    ok "rm --checkpoints of a run another shares: refused, nothing removed"
else
    fail "rm --checkpoints of a run another shares: refused, nothing removed" "rc=$rc: $out"
fi
out=$($T runs rm first second --checkpoints --db "$DB" 2>&1)
rc=$?
if [ $rc -eq 0 ] && [ ! -e "$CK/runs/$A" ] && echo "$out" | grep -q "removed run $A" &&
    echo "$out" | grep -q "removed run $B" &&
    echo "$out" | grep -qF "removed the checkpoints of run $A: $CK/runs/$A (their chunks are removed by the next 'terarec ckpt gc --checkpoint_dir $CK')" &&
    rm -r "$CK/runs/$B" &&
    [ "$(sql "SELECT count(*) FROM runs WHERE id IN ('$A', '$B')")" = 0 ] && [ -d "$CK/runs/$RID" ] && [ -d "$CK/chunks" ]
then
    ok "rm --checkpoints of both: rows and ROOT/runs/<ckpt_run> gone, other runs' and chunks kept"
else
    fail "rm --checkpoints of both: rows and ROOT/runs/<ckpt_run> gone, other runs' and chunks kept" "rc=$rc: $out"
fi
out=$($T runs rm killed --checkpoints --db "$DB" 2>&1)
[ $? -eq 0 ] && [ ! -e "$CK/runs/$RID" ] && ok "rm --checkpoints of the lost run" ||
    fail "rm --checkpoints of the lost run" "$out"

$PY - "$DB" <<'PYEOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("INSERT INTO runs (id, name, status, ckpt_url, ckpt_run, start_time) VALUES"
           " ('20261127-http', 'outside', 'completed', 'https://store.example:8443', 'outside-ck', 1)")
db.execute("INSERT INTO runs (id, name, status, ckpt_url, ckpt_run, start_time) VALUES"
           " ('20261127-live', 'live', 'running', 'serve:/nonexistent', 'live-ck', 2)")
db.commit()
PYEOF
out=$($T runs rm outside --checkpoints --db "$DB" 2>&1)
rc=$?
if [ $rc -eq 2 ] && echo "$out" | grep 'error:' | grep -q "https://store.example:8443" &&
    echo "$out" | grep 'hint:' | grep -q "ckpt gc" && [ "$(sql "SELECT count(*) FROM runs WHERE name = 'outside'")" = 1 ]
then
    ok "rm --checkpoints of a store behind a URL: refused with a hint"
else
    fail "rm --checkpoints of a store behind a URL: refused with a hint" "rc=$rc: $out"
fi
out=$($T runs rm live --checkpoints --db "$DB" 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep 'error:' | grep -q "is running" && ok "rm --checkpoints of a running run: refused" ||
    fail "rm --checkpoints of a running run: refused" "rc=$rc: $out"
out=$($T runs rm outside --db "$DB" 2>&1)
[ $? -eq 0 ] && ok "rm without --checkpoints still removes the rows" || fail "rm without --checkpoints still removes the rows" "$out"
done_testing
