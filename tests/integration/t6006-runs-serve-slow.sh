#!/usr/bin/env bash
# t6006: `terarec runs serve` while a request is slow, on a history written by a
# real `terarec train` run (plus 100,000 metric rows in it with python3's
# sqlite3). The slow request is /api/runs/RUN, made endless with the fault
# injection TR_DB_FAULT_SLOW_URL (the server warns that it is set); before, that
# very request was slow by itself (its last-metrics query scanned the run once
# per row: a minute at 100k rows) and held up every other.
# - while it runs, /healthz and /api/runs are answered (within 5 s; they waited
#   for it before);
# - with --request_timeout 3 it is answered 503 with the reason, in well under
#   the default limit, and the server goes on answering;
# - SIGTERM during it ends the server within 2 s;
# - a request waiting for a file another process holds locked ends at
#   --request_timeout (503), and SIGTERM ends the server during such a wait too.
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
PY=/usr/bin/python3
use_mpi
cd "$TMP" || exit 1
DB=$TMP/hist/runs.db
M="--batch_size 256 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --threads 1 --synthetic_dataset_valid_batches 2"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT

if ! $T train --db "$DB" --workers 1 $M --max_steps 20 --print_freq 5 --name real >train.out 2>&1; then
    fail "a real training run fills the history" "$(tail -n 5 train.out)"
    done_testing
fi
ok "a real training run fills the history"
RID=$($PY - "$DB" <<'PYEOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
run = db.execute("SELECT id FROM runs WHERE name = 'real'").fetchone()[0]
def rows():  # three metrics a step, and one that stopped in the first tenth
    for s in range(100, 32358):
        for nm in ("loss", "learning_rate", "samples_per_s"):
            yield (run, s, nm, 0.5, 1764000000.0 + s)
        if s < 3325:
            yield (run, s, "warmup_lr", 0.1, 1764000000.0 + s)
db.executemany("INSERT INTO metrics (run, step, name, value, time) VALUES (?, ?, ?, ?, ?)", rows())
db.commit()
print(run)
PYEOF
)

# serve ARGS...: a server in the background on a free port; URL (empty when it did
# not come up), SPID, SERR
serve() {
    local out=$TMP/serve.$RANDOM
    TR_DB_FAULT_SLOW_URL="/api/runs/$RID" "$@" >"$out.out" 2>"$out.err" &
    SPID=$!
    PIDS+=("$SPID")
    URL=""
    for _ in $(seq 100); do
        URL=$(sed -n 's|^terarec runs serve: \(http://[^ ]*\)/ .*|\1|p' "$out.out")
        [ -n "$URL" ] && break
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.1
    done
    SERR=$out.err
}
now() { date +%s.%N; }
secs() { awk "BEGIN{printf \"%.2f\", $2 - $1}"; }

# ---- other requests go on while one is slow -----------------------------------------------------------------
serve $T runs serve --db "$DB" --listen 127.0.0.1:0
if [ -z "$URL" ]; then
    fail "serve starts" "$(cat "$SERR")"
    done_testing
fi
grep -q "TR_DB_FAULT_SLOW_URL is set" "$SERR" && ok "the fault injection is announced" ||
    fail "the fault injection is announced" "$(cat "$SERR")"
curl -s -o slow.body -w '%{http_code}' "$URL/api/runs/$RID" >slow.code 2>/dev/null &
SLOW=$!
sleep 1
kill -0 "$SLOW" 2>/dev/null && ok "the slow request is in flight" || fail "the slow request is in flight" "$(cat slow.code)"
t0=$(now)
code=$(curl -s -m 5 -o hz.body -w '%{http_code}' "$URL/healthz")
t1=$(now)
[ "$code" = 200 ] && ok "/healthz answered during it ($(secs "$t0" "$t1") s)" ||
    fail "/healthz answered during it" "code=$code after $(secs "$t0" "$t1") s"
code=$(curl -s -m 5 -o runs.json -w '%{http_code}' "$URL/api/runs")
[ "$code" = 200 ] && grep -q "\"id\":\"$RID\"" runs.json && ok "/api/runs answered during it" ||
    fail "/api/runs answered during it" "code=$code"

# ---- SIGTERM during the slow request -------------------------------------------------------------------------
kill -0 "$SLOW" 2>/dev/null && ok "still slow before SIGTERM" || fail "still slow before SIGTERM"
t0=$(now)
kill -TERM "$SPID"
for _ in $(seq 100); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.05; done
t1=$(now)
if ! kill -0 "$SPID" 2>/dev/null && awk "BEGIN{exit !($t1 - $t0 <= 2.0)}"; then
    ok "SIGTERM ends the server within 2 s ($(secs "$t0" "$t1") s)"
else
    fail "SIGTERM ends the server within 2 s" "still running after $(secs "$t0" "$t1") s"
fi
wait "$SLOW" 2>/dev/null
grep -q "stopped (SIGTERM)" "$SERR" && ok "it says it stopped" || fail "it says it stopped" "$(cat "$SERR")"

# ---- a time limit per request ----------------------------------------------------------------------------------
serve $T runs serve --db "$DB" --listen 127.0.0.1:0 --request_timeout 3
if [ -z "$URL" ]; then
    fail "serve --request_timeout 3 starts" "$(cat "$SERR")"
    done_testing
fi
t0=$(now)
code=$(curl -s -m 25 -o slow.body -w '%{http_code}' "$URL/api/runs/$RID")
t1=$(now)
if [ "$code" = 503 ] && grep -q "took longer than 3 s" slow.body && awk "BEGIN{exit !($t1 - $t0 < 20)}"; then
    ok "a request past --request_timeout: 503 with the reason ($(secs "$t0" "$t1") s)"
else
    fail "a request past --request_timeout: 503 with the reason" "code=$code after $(secs "$t0" "$t1") s: $(cat slow.body)"
fi
code=$(curl -s -m 5 -o /dev/null -w "%{http_code}" "$URL/api/runs?limit=1")
[ "$code" = 200 ] && ok "the server goes on answering" || fail "the server goes on answering" "code=$code"
kill -TERM "$SPID"
wait "$SPID"
[ $? -eq 0 ] && ok "exit 0 on SIGTERM" || fail "exit 0 on SIGTERM"

# ---- a file another process holds locked (a rollback journal: readers wait) --------------------------------
$PY -c "import sqlite3,sys; s=sqlite3.connect(sys.argv[1]); d=sqlite3.connect(sys.argv[2]); s.backup(d);
d.execute('PRAGMA journal_mode=DELETE'); d.close()" "$DB" "$TMP/locked.db"
serve $T runs serve --db "$TMP/locked.db" --listen 127.0.0.1:0 --request_timeout 3
$PY - "$TMP/locked.db" <<'PYEOF' &
import sqlite3, sys, time
d = sqlite3.connect(sys.argv[1], isolation_level=None)
d.execute("BEGIN EXCLUSIVE")
d.execute("UPDATE runs SET name = name")
open(sys.argv[1] + ".held", "w").close()
time.sleep(40)
PYEOF
LOCKER=$!
PIDS+=("$LOCKER")
for _ in $(seq 100); do [ -e "$TMP/locked.db.held" ] && break; sleep 0.1; done
t0=$(now)
code=$(curl -s -m 25 -o busy.body -w '%{http_code}' "$URL/api/runs")
t1=$(now)
if [ "$code" = 503 ] && grep -q "took longer than 3 s" busy.body && awk "BEGIN{exit !($t1 - $t0 < 20)}"; then
    ok "waiting for a locked file ends at --request_timeout: 503 ($(secs "$t0" "$t1") s)"
else
    fail "waiting for a locked file ends at --request_timeout: 503" "code=$code after $(secs "$t0" "$t1") s: $(cat busy.body)"
fi
curl -s -o /dev/null "$URL/api/runs" 2>/dev/null &
sleep 0.5
t0=$(now)
kill -TERM "$SPID"
for _ in $(seq 100); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.05; done
t1=$(now)
if ! kill -0 "$SPID" 2>/dev/null && awk "BEGIN{exit !($t1 - $t0 <= 2.0)}"; then
    ok "SIGTERM while a request waits for the lock: ended within 2 s ($(secs "$t0" "$t1") s)"
else
    fail "SIGTERM while a request waits for the lock: ended within 2 s" "still running after $(secs "$t0" "$t1") s"
fi
kill "$LOCKER" 2>/dev/null
done_testing
