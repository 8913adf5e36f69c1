#!/usr/bin/env bash
# t6003: reading the run history without writing it, and reading a big one, on a
# history written by a real `terarec train` run:
# - read-only: on a tmpfs remounted read-only, as user nobody in a directory it
#   cannot write, and while another process holds the file's write lock (for less
#   than the busy timeout), list, show, export and serve work (also on a file of
#   schema version 2, read as it is: no system metrics); a writer (runs rm)
#   is refused with one error naming the file and why, and a hint (--db);
# - big: 1,000,000 metric rows in one run (among them a metric that stopped early,
#   which made the old last-metrics query scan the run once per row: minutes at
#   100k rows, hours at 1M) and `runs show` / `runs list` finish in seconds (bound:
#   60 s, against more than an hour before); the index it needs exists.
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
PY=/usr/bin/python3
use_mpi
cd "$TMP" || exit 1
DB=$TMP/hist/runs.db
M="--batch_size 256 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --threads 1 --synthetic_dataset_valid_batches 2"
MNT=$TMP/ro
SPIDS=()
cleanup() {
    for p in "${SPIDS[@]}"; do kill "$p" 2>/dev/null; done
    mountpoint -q "$MNT" 2>/dev/null && umount "$MNT"
    rm -rf "$TMP"
}
trap cleanup EXIT
if ! $T train --db "$DB" --workers 1 $M --max_steps 20 --print_freq 5 --checkpoint_every 10 --name small \
    >train.out 2>&1; then
    fail "a real training run fills the history" "$(tail -n 5 train.out)"
    done_testing
fi
ok "a real training run fills the history"
RID=$($PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select id from runs where name='small'\").fetchone()[0])" "$DB")
copy() { # the history, consistent, into $1 (WAL journal as the original)
    $PY -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d); d.close()" "$DB" "$1"
}

# reads DB WHO...: list, show, export json, and a server's /api/runs, each with the run in it
reads() {
    local db=$1; shift
    local out
    out=$("$@" $T runs list --db "$db" 2>&1) && echo "$out" | grep -q "^$RID .*small .*completed" || { echo "list: $out"; return 1; }
    out=$("$@" $T runs show small --db "$db" 2>&1) && echo "$out" | grep -q "^  status  *completed" || { echo "show: $out"; return 1; }
    out=$("$@" $T runs export small --format json --db "$db" 2>&1) && echo "$out" | grep -q "\"id\": \"$RID\"" ||
        { echo "export: $out"; return 1; }
    "$@" $T runs serve --db "$db" --listen 127.0.0.1:0 >serve.out 2>serve.err &
    local spid=$! url=""
    SPIDS+=("$spid")
    for _ in $(seq 100); do
        url=$(sed -n 's|^terarec runs serve: \(http://[^ ]*\)/ .*|\1|p' serve.out)
        [ -n "$url" ] && break
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    out=$(curl -sf "$url/api/runs" 2>&1)
    kill "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    echo "$out" | grep -q "\"id\":\"$RID\"" || { echo "serve: $out $(cat serve.err)"; return 1; }
}
# refused NAME WHAT DB WHO...: runs rm is refused, exit 2, one error naming the file and WHAT, a hint
refused() {
    local name=$1 what=$2 db=$3; shift 3
    local out rc
    out=$("$@" $T runs rm small --db "$db" 2>&1)
    rc=$?
    if [ $rc -eq 2 ] && [ "$(echo "$out" | grep -c 'error:')" = 1 ] &&
        echo "$out" | grep 'error:' | grep -qF "'$db'" && echo "$out" | grep 'error:' | grep -q "$what" &&
        echo "$out" | grep 'hint:' | grep -q -- "--db PATH"; then
        ok "$name"
    else
        fail "$name" "rc=$rc: $out"
    fi
}

# ---- a read-only file system ------------------------------------------------------------------------------
if mkdir -p "$MNT" && mount -t tmpfs -o size=16m tmpfs "$MNT" 2>/dev/null; then
    copy "$MNT/runs.db"
    copy "$MNT/v2.db" # as a terarec before the system metrics wrote it
    $PY -c "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.executescript('DROP TABLE sysmetrics; PRAGMA user_version=2')" \
        "$MNT/v2.db"
    mount -o remount,ro "$MNT"
    check "a read-only file system: list, show, export, serve" reads "$MNT/runs.db"
    check "a read-only file system, schema version 2 (read as it is): list, show, export, serve" reads "$MNT/v2.db"
    out=$($T runs show small --db "$MNT/v2.db" --json 2>/dev/null)
    echo "$out" | $PY -c 'import json,sys; j=json.load(sys.stdin); assert j["sysmetrics_summary"] == [], j' &&
        ! $T runs show small --db "$MNT/v2.db" 2>&1 | grep -q "system metrics" &&
        ok "schema version 2: no system metrics, and no error for their table" || fail "schema version 2: no system metrics" "$out"
    refused "a read-only file system: rm refused, naming the file and why" "Read-only file system" "$MNT/runs.db"
    umount "$MNT"
else
    skip "a read-only file system" "cannot mount a tmpfs here"
fi

# ---- another user, a directory and file it cannot write -----------------------------------------------------
if command -v setpriv >/dev/null && setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null; then
    chmod 755 "$TMP"
    mkdir -p "$TMP/shared"
    copy "$TMP/shared/runs.db"
    chmod 644 "$TMP/shared/runs.db"
    chmod 755 "$TMP/shared"
    AS_NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME=/nonexistent)
    check "as nobody (file and directory not writable): list, show, export, serve" reads "$TMP/shared/runs.db" \
        "${AS_NOBODY[@]}"
    refused "as nobody: rm refused, naming the file and why" "Permission denied" "$TMP/shared/runs.db" "${AS_NOBODY[@]}"
else
    skip "as another user" "setpriv cannot switch to nobody here"
fi

# ---- a file another process holds the write lock of ---------------------------------------------------------
copy "$TMP/locked.db"
$PY -c "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.execute('PRAGMA journal_mode=DELETE'); d.close()" "$TMP/locked.db"
$PY - "$TMP/locked.db" <<'PYEOF' &
import sqlite3, sys, time
d = sqlite3.connect(sys.argv[1], isolation_level=None)
d.execute("BEGIN EXCLUSIVE")
d.execute("UPDATE runs SET name = name")
open(sys.argv[1] + ".held", "w").close()
time.sleep(3)
d.execute("COMMIT")
PYEOF
LOCKER=$!
for _ in $(seq 100); do [ -e "$TMP/locked.db.held" ] && break; sleep 0.1; done
t0=$(date +%s.%N)
out=$($T runs list --db "$TMP/locked.db" 2>&1)
rc=$?
t1=$(date +%s.%N)
wait "$LOCKER"
if [ $rc -eq 0 ] && echo "$out" | grep -q "^$RID" && awk "BEGIN{exit !($t1 - $t0 > 1.5)}"; then
    ok "a file another process holds locked: list waits for it (busy timeout) and reads"
else
    fail "a file another process holds locked: list waits for it (busy timeout) and reads" "rc=$rc $(awk "BEGIN{print $t1 - $t0}") s: $out"
fi

# ---- 1,000,000 metric rows in one run ----------------------------------------------------------------------
$PY - "$DB" "$RID" <<'PYEOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
run = sys.argv[2]
n, names = 1000000, ["loss", "learning_rate", "samples_per_s"]
steps = n * 10 // 31  # three metrics every step, and warmup_lr in the first tenth
def rows():
    for s in range(1000, 1000 + steps):
        for nm in names:
            yield (run, s, nm, 1.0 / (1 + s), 1764000000.0 + s)
        if s - 1000 < n - 3 * steps:
            yield (run, s, "warmup_lr", 0.001 * s, 1764000000.0 + s)
db.executemany("INSERT INTO metrics (run, step, name, value, time) VALUES (?, ?, ?, ?, ?)", rows())
db.commit()
print(db.execute("SELECT count(*) FROM metrics WHERE run = ?", (run,)).fetchone()[0])
PYEOF
last=$((1000 + 1000000 * 10 / 31 - 1))
wlast=$((1000 + 1000000 - 3 * (1000000 * 10 / 31) - 1))
big() { # NAME CMD...: finishes within 60 s (it took more than an hour before), exit 0; output in big.out
    local name=$1; shift
    local t0 t1 rc
    t0=$(date +%s.%N)
    timeout 60 "$@" >big.out 2>&1
    rc=$?
    t1=$(date +%s.%N)
    if [ $rc -eq 0 ]; then ok "$name ($(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s)"; else fail "$name" "rc=$rc (124: timed out) $(tail -3 big.out)"; fi
}
big "1M metric rows: runs show within 60 s" $T runs show small --db "$DB"
if grep -q "^  loss  *$last " big.out && grep -q "^  warmup_lr  *$wlast " big.out; then
    ok "runs show: the last step of each metric, one that stopped early too"
else
    fail "runs show: the last step of each metric, one that stopped early too" "$(grep -A8 'last metrics' big.out)"
fi
big "1M metric rows: runs show --json within 60 s" $T runs show small --json --db "$DB"
big "1M metric rows: runs list within 60 s" $T runs list --db "$DB"
grep -q "^$RID .* $last " big.out && ok "runs list: its steps" || fail "runs list: its steps" "$(cat big.out)"
[ "$($PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select count(*) from sqlite_master where name='metrics_run_name_step'\").fetchone()[0])" "$DB")" = 1 ] &&
    ok "the index metrics(run, name, step) exists" || fail "the index metrics(run, name, step) exists"
done_testing
