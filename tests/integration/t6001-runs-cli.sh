#!/usr/bin/env bash
# t6001: `terarec runs` on a run history written here with python3's sqlite3
# (rows as db/db.h's schema describes them): list, show, metrics, compare and
# export (csv, and json parsed back), plot (a PNG whose IHDR has the asked size,
# an SVG that parses as XML and has a path), rm removing the rows of every
# table, and the refusals, each exit 2 with one line naming what is wrong: no
# history, an unknown run, a bad chart extension, a metric a run lacks, a
# history from a newer schema. Then tag, note and rename (refusing a name another
# run has, a history this user cannot write), list --filter on a parameter, a
# final metric and tags (an unknown key's error and close keys), --columns and
# --sort, compare's config diff and final metrics, 1e-07 printed without float
# noise, --json that is JSON from its first line, and the process of a failed run
# whose end was never recorded.
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
if echo "$out" | grep -q "^  lr  *0.5  *1  *0.5$" && echo "$out" | grep -q "^  batch " &&
    ! echo "$out" | grep -q "dim" && echo "$out" | grep -q "^best_auc .*0.8"; then
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

# ---- tags, notes, names; filters, columns, sort; compare; numbers; --json; processes ---------------------
# three runs as the launcher writes them: config values are text (as its flags
# print), 1e-07 written with float noise; final metrics from the summary; a failed
# run whose rank 1 never recorded its end
$PY - "$DB" <<'PYEOF'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
t0 = 1764100000.0
runs = [("20261125-tb01", "tb-lr-high", "completed", "0.050000000000000003", "adagrad", 0.8012, 120000.0),
        ("20261125-tb02", "tb-lr-low", "completed", "9.9999999999999995e-08", "sgd", 0.7625, 150000.0),
        ("20261125-tb03", "other", "failed", "0.01", "adagrad", None, None)]
for i, (rid, name, status, lr, opt, auc, sps) in enumerate(runs):
    cfg = {"learning_rate": lr, "optimizer": opt, "batch_size": "2048", "embedding_dim": "16"}
    fm = None if auc is None else json.dumps({"auc": auc, "throughput": sps, "steps": 100,
                                              "phase_ms_per_step": {"data": 0.5}})
    db.execute("INSERT INTO runs (id, name, status, config, hosts, nodes, workers, slurm_job_id, start_time, end_time,"
               " final_metrics) VALUES (?, ?, ?, ?, 'n1,n2', 2, 4, ?, ?, ?, ?)",
               (rid, name, status, json.dumps(cfg), "77" if status == "failed" else None, t0 + i, t0 + i + 60, fm))
    db.execute("INSERT INTO metrics VALUES (?, 100, 'samples_per_s', ?, ?)", (rid, sps or 1.0, t0 + i))
db.execute("INSERT INTO processes VALUES ('20261125-tb03', 0, 0, 'n1', 11, 1, NULL, ?, ?)", (t0, t0 + 50))
db.execute("INSERT INTO processes VALUES ('20261125-tb03', 0, 1, 'n2', 12, NULL, NULL, ?, NULL)", (t0,))
db.commit()
PYEOF
out=$($T runs tag tb-lr-high baseline sweep --db "$DB" 2>&1) && $T runs tag tb-lr-low sweep old --db "$DB" >/dev/null &&
    $T runs tag tb-lr-low --rm old --db "$DB" >/dev/null
[ "$(count "SELECT tags FROM runs WHERE id = '20261125-tb01'")" = '["baseline","sweep"]' ] &&
    [ "$(count "SELECT tags FROM runs WHERE id = '20261125-tb02'")" = '["sweep"]' ] && echo "$out" | grep -q baseline &&
    ok "tag: adds tags (a set), --rm removes one" || fail "tag: adds tags (a set), --rm removes one" "$out"
refuse "tag: a tag with a space" "'two words'" $T runs tag tb-lr-high "two words" --db "$DB"
echo "lr sweep: the high end" >"$TMP/note.txt"
$T runs note tb-lr-high -F "$TMP/note.txt" --db "$DB" >/dev/null 2>&1
$T runs note tb-lr-low "the low end" --db "$DB" >/dev/null 2>&1
out=$($T runs show tb-lr-high --db "$DB" 2>&1)
echo "$out" | grep -q "^  tags  *baseline, sweep$" && echo "$out" | grep -q "^  note  *lr sweep: the high end$" &&
    ok "note (-F FILE, and a text): show has the tags and the note" ||
    fail "note (-F FILE, and a text): show has the tags and the note" "$out"
refuse "rename: to another run's name, naming it" "run '20261125-tb03' has that name" \
    $T runs rename tb-lr-high other --db "$DB"
out=$($T runs rename tb-lr-high tb-lr-top --db "$DB" 2>&1)
[ "$(count "SELECT name FROM runs WHERE id = '20261125-tb01'")" = tb-lr-top ] && echo "$out" | grep -q "tb-lr-top" &&
    ok "rename" || fail "rename" "$out"
if command -v setpriv >/dev/null && setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null; then
    mkdir -p "$TMP/ro" && cp "$DB" "$TMP/ro/runs.db" && chmod 755 "$TMP" "$TMP/ro" && chmod 644 "$TMP/ro/runs.db"
    refuse "tag: a history this user cannot write is refused, named" "'$TMP/ro/runs.db'" \
        setpriv --reuid=nobody --regid=nogroup --clear-groups $T runs tag tb-lr-low x --db "$TMP/ro/runs.db"
else
    skip "tag: a history this user cannot write" "setpriv cannot switch to nobody here"
fi

names() { # the names of `runs list --json ARGS...`, space-separated, in order
    $T runs list --db "$DB" --json "$@" 2>/dev/null | $PY -c 'import json,sys; print(" ".join(r["name"] or "-" for r in json.load(sys.stdin)))'
}
[ "$(names --filter 'learning_rate>0.001')" = "other tb-lr-top" ] && ok "filter: a parameter (>), numbers from text" ||
    fail "filter: a parameter (>), numbers from text" "$(names --filter 'learning_rate>0.001')"
[ "$(names --filter optimizer=adagrad --filter status=completed)" = "tb-lr-top" ] &&
    ok "filter: a text parameter and status (repeated: and)" || fail "filter: a text parameter and status (repeated: and)" \
    "$(names --filter optimizer=adagrad --filter status=completed)"
[ "$(names --filter 'auc>=0.79')" = "tb-lr-top" ] && [ "$(names --filter 'learning_rate=1e-7')" = "tb-lr-low" ] &&
    ok "filter: a final metric (>=), a parameter (= as numbers)" || fail "filter: a final metric (>=), a parameter (= as numbers)" \
    "$(names --filter 'auc>=0.79') / $(names --filter 'learning_rate=1e-7')"
[ "$(names --filter tag=sweep)" = "tb-lr-low tb-lr-top" ] && [ "$(names --filter tag!=baseline --filter name~tb-)" = "tb-lr-low" ] &&
    ok "filter: tag=, tag!=, name~" || fail "filter: tag=, tag!=, name~" "$(names --filter tag=sweep)"
refuse "filter: an unknown key, named" "'lerning_rate'" $T runs list --filter 'lerning_rate>0.01' --db "$DB"
out=$($T runs list --filter 'lerning_rate>0.01' --db "$DB" 2>&1)
echo "$out" | grep "hint:" | grep -q "learning_rate (parameter)" && ok "filter: the hint lists close keys" ||
    fail "filter: the hint lists close keys" "$out"
refuse "filter: < with a word" "'<' compares numbers" $T runs list --filter 'optimizer<adagrad' --db "$DB"

out=$($T runs list --columns name,learning_rate,auc,samples_per_s --sort -auc --filter name~tb- --db "$DB" 2>&1)
if [ "$(echo "$out" | head -1 | tr -s ' ')" = "name learning_rate auc samples_per_s" ] &&
    echo "$out" | sed -n 2p | grep -q "^tb-lr-top  *0.05  *0.8012  *120000" &&
    echo "$out" | sed -n 3p | grep -q "^tb-lr-low  *1e-07  *0.7625  *150000"; then
    ok "list --columns --sort -auc: chosen columns, sorted, 1e-07 without float noise"
else
    fail "list --columns --sort -auc: chosen columns, sorted, 1e-07 without float noise" "$out"
fi
[ "$(names --sort samples_per_s --filter name~tb-)" = "tb-lr-top tb-lr-low" ] && ok "list --sort ascending" ||
    fail "list --sort ascending" "$(names --sort samples_per_s --filter name~tb-)"
check "list --columns --json: the id and the columns, numbers as numbers" bash -c "$T runs list --db '$DB' --json \
    --columns name,learning_rate,tags,phase_ms_per_step.data --filter tag=baseline | $PY -c 'import json,sys; a=json.load(sys.stdin);
assert a==[{\"id\":\"20261125-tb01\",\"name\":\"tb-lr-top\",\"learning_rate\":0.05,\"tags\":[\"baseline\",\"sweep\"],
\"phase_ms_per_step.data\":0.5}], a'"
out=$($T runs list --db "$DB" 2>&1)
echo "$out" | grep -q "^20261125-tb01 .*2 nodes, 4 workers .*baseline,sweep  *lr sweep: the high end$" &&
    ok "list: nodes and workers in words, tags, note" ||
    fail "list: nodes and workers in words, tags, note" "$out"

out=$($T runs compare tb-lr-top tb-lr-low --db "$DB" 2>&1)
if echo "$out" | grep -q "^config: 2 differ, 2 the same:" && echo "$out" | grep -q "^  learning_rate  *0.05  *1e-07$" &&
    echo "$out" | grep -q "^  optimizer  *adagrad  *sgd$" && ! echo "$out" | grep -q "batch_size" &&
    echo "$out" | grep -q "^  auc  *0.8012  *0.7625$" && echo "$out" | grep -q "^  throughput  *120000  *150000$"; then
    ok "compare: the config keys that differ (and a count of the rest), final metrics per run"
else
    fail "compare: the config keys that differ (and a count of the rest), final metrics per run" "$out"
fi
check "compare --json: config_diff, config_equal, final_metrics" bash -c "$T runs compare tb-lr-top tb-lr-low --json \
    --db '$DB' | $PY -c 'import json,sys; j=json.load(sys.stdin); assert j[\"config_diff\"]=={\"learning_rate\":[\"0.05\",\"1e-07\"],
\"optimizer\":[\"adagrad\",\"sgd\"]} and j[\"config_equal\"]==2, j; assert j[\"final_metrics\"][\"auc\"]==[0.8012,0.7625], j'"
out=$($T runs show tb-lr-low --db "$DB" 2>&1; $T runs show tb-lr-low --json --db "$DB" 2>&1)
echo "$out" | grep -q '"learning_rate":"1e-07"' && echo "$out" | grep -q '"learning_rate": "1e-07"' &&
    ! echo "$out" | grep -q "99999" && ok "show (and --json): config values without float noise" ||
    fail "show (and --json): config values without float noise" "$out"

out=$($T runs show other --db "$DB" 2>&1)
echo "$out" | grep -q "^  0  *1  *n2  *12  *ended (exit unknown) " && ! echo "$out" | grep -q running &&
    ok "a failed run's process without a recorded end: ended (exit unknown), not running" ||
    fail "a failed run's process without a recorded end: ended (exit unknown), not running" "$out"

# --json is JSON from its first line on stdout, whatever is logged (an old history
# migrated on the way, a lost run found)
cp "$DB" "$TMP/old.db"
$PY - "$TMP/old.db" <<'PYEOF'
import sqlite3, sys
d = sqlite3.connect(sys.argv[1])
d.execute("INSERT INTO runs (id, name, status, start_time, launcher_host, launcher_pid, heartbeat) VALUES"
          " ('20261125-lost', 'gone', 'running', 1764100000, 'elsewhere', 1, 1764100000)")
d.execute("PRAGMA user_version = 2")
d.commit()
PYEOF
jsonfirst() { # CMD...: stdout parses as JSON, and its first line opens it
    local out
    out=$(TR_LOG=debug "$@" 2>/dev/null) || { echo "exit $?"; return 1; }
    printf '%s' "$out" | $PY -c 'import json,sys; s=sys.stdin.read(); assert s[:1] in "[{", s[:200]; json.loads(s)'
}
check "--json from the first line: list (migrating an old history, a lost run)" jsonfirst $T runs list --json --db "$TMP/old.db"
for c in "show tb-lr-low --json" "metrics tb-lr-low --json" "compare tb-lr-top other --json" "export gone --format json"
do
    check "--json from the first line: $c" jsonfirst $T runs $c --db "$TMP/old.db"
done
done_testing
