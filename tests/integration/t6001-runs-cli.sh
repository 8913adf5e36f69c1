#!/usr/bin/env bash
# t6001: `terarec runs` on a run history written here with python3's sqlite3
# (rows as db/db.h's schema describes them): list, show, metrics, compare and
# export (csv, and json parsed back), plot (a PNG whose IHDR has the asked size,
# an SVG that parses as XML and has a path), rm removing the rows of every
# table, and the refusals, each exit 2 with one line naming what is wrong: no
# history, an unknown run, a bad chart extension, a metric a run lacks, a
# history from a newer schema.
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
PY=/usr/bin/python3
DB=$TMP/runs.db
cd "$TMP" || exit 1

out=$($T runs list --db "$DB" 2>&1)
rc=$?
if [ $rc -eq 2 ] && echo "$out" | grep -q "no run history at '$DB'" && echo "$out" | grep -q "hint:"; then
    ok "a missing history: exit 2, named, with a hint"
else
    fail "a missing history: exit 2, named, with a hint" "rc=$rc: $out"
fi
[ ! -e "$DB" ] && ok "list does not create the history" || fail "list does not create the history"

$PY - "$DB" <<'PYEOF'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.executescript("""
CREATE TABLE runs (id TEXT PRIMARY KEY NOT NULL, name TEXT, status TEXT NOT NULL, cmdline TEXT, config TEXT,
  git_hash TEXT, hosts TEXT, nodes INTEGER, workers INTEGER, slurm_job_id TEXT, ckpt_url TEXT, ckpt_run TEXT,
  start_time REAL, end_time REAL, final_metrics TEXT, reason TEXT, restarts INTEGER NOT NULL DEFAULT 0,
  resumed_from TEXT);
CREATE TABLE metrics (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, step INTEGER NOT NULL,
  name TEXT NOT NULL, value REAL, time REAL);
CREATE TABLE evals (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, step INTEGER NOT NULL, auc REAL,
  logloss REAL, samples INTEGER, time REAL);
CREATE TABLE checkpoints (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, step INTEGER NOT NULL,
  manifest_url TEXT, bytes INTEGER, stall_s REAL, time REAL);
CREATE TABLE processes (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL, host TEXT, pid INTEGER, exit_code INTEGER, signal INTEGER, start_time REAL, end_time REAL);
CREATE TABLE events (run TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, time REAL, kind TEXT NOT NULL,
  data TEXT);
PRAGMA user_version = 1;
""")
t0 = 1764000000.0
runs = [
    ("20261124-aaaa", "baseline", "completed", {"lr": 0.5, "batch": 2048, "dim": 16}, "node1,node2", None, 0, 3600),
    ("20261124-bbbb", "bigger-lr", "failed", {"lr": 1.0, "batch": 2048, "dim": 16}, "node3", "991", 4000, 5000),
    ("20261124-cccc", None, "running", {"lr": 0.5, "batch": 4096, "dim": 16}, "node4", "992", 6000, None),
]
for i, (rid, name, status, cfg, hosts, job, s, e) in enumerate(runs):
    db.execute("INSERT INTO runs (id, name, status, cmdline, config, git_hash, hosts, nodes, workers, slurm_job_id,"
               " ckpt_url, ckpt_run, start_time, end_time, final_metrics, reason) VALUES"
               " (?, ?, ?, 'terarec train', ?, 'deadbeef', ?, 1, 4, ?, '/ck', ?, ?, ?, ?, ?)",
               (rid, name, status, json.dumps(cfg), hosts, job, rid, t0 + s, None if e is None else t0 + e,
                json.dumps({"auc": 0.8}) if status == "completed" else None,
                "max_steps reached" if status == "completed" else None))
    for step in range(0, 1001, 100):
        loss = (1 + 0.25 * i) / (1 + step / 100.0)
        db.execute("INSERT INTO metrics VALUES (?, ?, 'loss', ?, ?)", (rid, step, loss, t0 + s))
        db.execute("INSERT INTO metrics VALUES (?, ?, 'samples_per_s', ?, ?)", (rid, step, 50000.0 + step, t0 + s))
    if rid != "20261124-cccc":
        for step in (500, 1000):
            db.execute("INSERT INTO evals VALUES (?, ?, ?, ?, 100000, ?)", (rid, step, 0.75 + step / 20000.0,
                                                                           0.45, t0 + s))
    db.execute("INSERT INTO checkpoints VALUES (?, 1000, '/ck/m.json', 4096, 0.25, ?)", (rid, t0 + s))
    db.execute("INSERT INTO processes VALUES (?, 0, 0, 'node1', 4242, 0, NULL, ?, ?)", (rid, t0 + s, t0 + s + 10))
    db.execute("INSERT INTO processes VALUES (?, 0, 1, 'node2', 4243, NULL, 9, ?, ?)", (rid, t0 + s, t0 + s + 10))
    db.execute("INSERT INTO events VALUES (?, ?, 'started', '{\"attempt\": 0}')", (rid, t0 + s))
db.commit()
PYEOF
ok "write a history with python3's sqlite3"

count() { # SQL: the first column of its first row
    $PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])" "$DB" "$1"
}

# ---- list ---------------------------------------------------------------------------------------------
out=$($T runs list --db "$DB" 2>&1)
if echo "$out" | head -1 | grep -q "^id .*status" && echo "$out" | grep -q "20261124-aaaa .*baseline .*completed" &&
    echo "$out" | grep -q "slurm 991" && echo "$out" | grep -q "1h00m" &&
    [ "$(echo "$out" | sed -n 2p | cut -d' ' -f1)" = 20261124-cccc ]; then
    ok "list: a table, newest first, with durations and jobs"
else
    fail "list: a table, newest first, with durations and jobs" "$out"
fi
out=$(TR_DB=$DB $T runs list --status failed --limit 5 2>&1)
[ "$(echo "$out" | grep -c 20261124)" = 1 ] && echo "$out" | grep -q bbbb && ok "list --status (history from TR_DB)" ||
    fail "list --status (history from TR_DB)" "$out"
check "list --json: parsed, limited" bash -c "$T runs list --db '$DB' --json --limit 2 |
    $PY -c 'import json,sys; a=json.load(sys.stdin); assert len(a)==2 and a[0][\"id\"]==\"20261124-cccc\", a;
assert a[1][\"steps\"]==1000 and abs(a[1][\"best_auc\"]-0.8)<1e-9, a[1]'"

# ---- show / metrics --------------------------------------------------------------------------------------
out=$($T runs show baseline --db "$DB" 2>&1)
if echo "$out" | grep -q "^run 20261124-aaaa" && echo "$out" | grep -q "max_steps reached" &&
    echo "$out" | grep -q "SIGKILL" && echo "$out" | grep -q "exit 0" && echo "$out" | grep -q "started" &&
    echo "$out" | grep -q "/ck/m.json"; then
    ok "show: fields, processes (exit code, signal name), checkpoints, events"
else
    fail "show: fields, processes (exit code, signal name), checkpoints, events" "$out"
fi
check "show --json (by id prefix)" bash -c "$T runs show 20261124-b --json --db '$DB' |
    $PY -c 'import json,sys; j=json.load(sys.stdin); assert j[\"run\"][\"config\"][\"lr\"]==1.0, j;
assert len(j[\"processes\"])==2 and j[\"processes\"][1][\"ended\"]==\"SIGKILL\", j[\"processes\"]'"
out=$($T runs metrics 20261124-aaaa --name loss --db "$DB" 2>&1)
[ "$(echo "$out" | head -3 | tr '\n' ' ')" = "step,name,value 0,loss,1 100,loss,0.5 " ] &&
    [ "$(echo "$out" | wc -l)" = 12 ] && ok "metrics --name: step,name,value rows" ||
    fail "metrics --name: step,name,value rows" "$out"

# ---- compare ----------------------------------------------------------------------------------------------
out=$($T runs compare baseline bigger-lr 20261124-c --db "$DB" 2>&1)
if echo "$out" | grep -q "^config.lr " && echo "$out" | grep -q "^config.batch " &&
    ! echo "$out" | grep -q "config.dim" && echo "$out" | grep -q "^best_auc .*0.8"; then
    ok "compare: summaries and only the config keys that differ"
else
    fail "compare: summaries and only the config keys that differ" "$out"
fi
check "compare --json" bash -c "$T runs compare baseline bigger-lr --json --db '$DB' |
    $PY -c 'import json,sys; j=json.load(sys.stdin); assert list(j[\"config_diff\"])==[\"lr\"], j;
assert j[\"config_diff\"][\"lr\"]==[0.5,1.0] and len(j[\"runs\"])==2, j'"

# ---- export ------------------------------------------------------------------------------------------------
$T runs export baseline --format csv -o "$TMP/a.csv" --db "$DB" 2>/dev/null
if [ "$(head -1 "$TMP/a.csv")" = "step,name,value" ] && grep -q "^1000,auc,0.8" "$TMP/a.csv" &&
    grep -q "^500,logloss,0.45" "$TMP/a.csv" && [ "$(wc -l <"$TMP/a.csv")" = $((1 + 22 + 4)) ]; then
    ok "export csv -o: metrics and evals as rows"
else
    fail "export csv -o: metrics and evals as rows" "$(head -5 "$TMP/a.csv" 2>&1)"
fi
check "export json: the run with all its tables" bash -c "$T runs export baseline --format json --db '$DB' |
    $PY -c 'import json,sys; j=json.load(sys.stdin);
assert [len(j[k]) for k in (\"metrics\",\"evals\",\"checkpoints\",\"processes\",\"events\")]==[22,2,1,2,1], j;
assert j[\"run\"][\"id\"]==\"20261124-aaaa\" and j[\"run\"][\"final_metrics\"]=={\"auc\":0.8}'"

# ---- plot ---------------------------------------------------------------------------------------------------
check "plot png" $T runs plot baseline bigger-lr 20261124-c --metric loss -o "$TMP/loss.png" --width 640 \
    --height 400 --title "loss" --db "$DB"
check "png: signature and IHDR size" $PY - "$TMP/loss.png" <<'PYEOF'
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", b[:8]
assert b[12:16] == b"IHDR"
w, h = struct.unpack(">II", b[16:24])
assert (w, h) == (640, 400), (w, h)
PYEOF
check "plot svg (auc from the evals)" $T runs plot baseline bigger-lr --metric auc -o "$TMP/auc.svg" --db "$DB"
check "svg: XML with a path" $PY -c "
import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot()
assert r.tag.endswith('svg'), r.tag
assert any(e.tag.endswith('path') for e in r.iter())" "$TMP/auc.svg"

# ---- refusals: exit 2 and one error line naming the thing -------------------------------------------------
refuse() { # name, what the error names, command...
    local name=$1 what=$2; shift 2
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    if [ $rc -eq 2 ] && [ "$(echo "$out" | grep -c 'error:')" = 1 ] && echo "$out" | grep 'error:' | grep -qF "$what"
    then
        ok "$name"
    else
        fail "$name" "rc=$rc: $out"
    fi
}
refuse "plot: a bad extension" "$TMP/x.jpg" $T runs plot baseline -o "$TMP/x.jpg" --db "$DB"
refuse "plot: a metric the run lacks" "'auc'" $T runs plot 20261124-c --metric auc -o "$TMP/y.png" --db "$DB"
[ ! -e "$TMP/y.png" ] && ok "no chart left behind" || fail "no chart left behind"
refuse "show: an unknown run" "'nope'" $T runs show nope --db "$DB"
refuse "show: an ambiguous prefix" "'20261124'" $T runs show 20261124 --db "$DB"
refuse "export: an unknown run" "'nope'" $T runs export nope --format csv --db "$DB"
cp "$DB" "$TMP/newer.db"
$PY -c "import sqlite3,sys; d=sqlite3.connect(sys.argv[1]); d.execute('PRAGMA user_version=99'); d.commit()" \
    "$TMP/newer.db"
refuse "a history from a newer schema" "version 99" $T runs list --db "$TMP/newer.db"
echo "not a database at all, but some bytes of text" >"$TMP/junk.db"
refuse "a file that is not SQLite" "$TMP/junk.db" $T runs list --db "$TMP/junk.db"

# ---- rm ----------------------------------------------------------------------------------------------------
out=$($T runs rm baseline 20261124-b --db "$DB" 2>&1)
if echo "$out" | grep -q "removed run 20261124-aaaa (22 metrics, 2 evals, 1 checkpoints, 2 processes, 1 events)" &&
    echo "$out" | grep -q "removed run 20261124-bbbb"; then
    ok "rm: says what it removed"
else
    fail "rm: says what it removed" "$out"
fi
left=""
for t in metrics evals checkpoints processes events; do
    left="$left $(count "SELECT count(*) FROM $t WHERE run IN ('20261124-aaaa', '20261124-bbbb')")"
done
[ "$left" = " 0 0 0 0 0" ] && [ "$(count 'SELECT count(*) FROM runs')" = 1 ] &&
    [ "$(count 'SELECT count(*) FROM metrics')" = 22 ] && ok "rm: the rows of every table are gone, others kept" ||
    fail "rm: the rows of every table are gone, others kept" "left:$left"
refuse "rm: an unknown run" "'baseline'" $T runs rm baseline --db "$DB"
check "help" $T runs --help
done_testing
