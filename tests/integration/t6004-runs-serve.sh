#!/usr/bin/env bash
# t6004: `terarec runs serve` over HTTP on loopback (curl), on a history filled by
# a real `terarec train` run plus rows written with python3's sqlite3:
# - the run recorded learning rate, step time and each rank's system metrics;
# - every page and endpoint answers (the run page's chart views and controls); the
#   JSON of /api/runs, /api/runs/ID, /api/runs/ID/metrics and /api/runs/ID/export
#   equals the CLI's --json (parsed); /api/runs/ID/sysmetrics has every rank;
#   so do /api/runs?filter=..&columns=..&sort=.. and /api/compare (config diff,
#   final metrics); a bad filter, column or sort is 400 with the CLI's words;
# - unknown or bad ids 404, injection attempts in ids and filters find nothing and
#   change nothing (the file's bytes are the same), bad numbers 400, writes 405;
# - a run named <script> and an id with quotes come out escaped in the HTML;
# - dygraphs is served from the installed package, and its absence is said;
# - --token_file: no/wrong token 401, Bearer / cookie / ?token= pass; a
#   non-loopback --listen without a token is refused (exit 2);
# - live: while a training run writes, the server reads (read-only) and sees its
#   metrics grow (?after=), and the run completes.
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
PY=/usr/bin/python3
use_mpi
cd "$TMP" || exit 1
DB=$TMP/hist/runs.db
M="--batch_size 256 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --threads 1 --synthetic_dataset_valid_batches 2"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT

if ! $T train --db "$DB" --workers 2 $M --max_steps 60 --print_freq 5 --checkpoint_every 30 --name real \
    >train.out 2>&1; then
    fail "a real training run fills the history" "$(tail -n 5 train.out)"
    done_testing
fi
ok "a real training run fills the history"
RID=$($PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select id from runs where name='real'\").fetchone()[0])" "$DB")
# what the run recorded besides loss: the learning rate and step time of every
# report, and each rank's system metrics (at least the sample before its bye)
got=$($PY - "$DB" "$RID" "$(nproc)" <<'PYEOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1]); run = sys.argv[2]; cores = int(sys.argv[3])
n = {k: db.execute("select count(*) from metrics where run = ? and name = ? and value is not null", (run, k)).fetchone()[0]
     for k in ("loss", "learning_rate", "step_time_ms")}
lr = db.execute("select min(value), max(value) from metrics where run = ? and name = 'learning_rate'", (run,)).fetchone()
st = db.execute("select min(value) from metrics where run = ? and name = 'step_time_ms'", (run,)).fetchone()[0]
ranks = [r[0] for r in db.execute("select distinct rank from sysmetrics where run = ? order by rank", (run,))]
bad = db.execute("select count(*) from sysmetrics where run = ? and (rss_bytes is null or rss_bytes <= 1048576"
                 " or cpu_pct < 0 or cpu_pct > ? or time is null or step < 0 or gpu_mem_bytes is not null)",
                 (run, 100 * cores)).fetchone()[0]
cpu = db.execute("select count(*) from sysmetrics where run = ? and cpu_pct is not null", (run,)).fetchone()[0]
print(int(n["loss"] == n["learning_rate"] == n["step_time_ms"] > 5), lr[0] == lr[1] == 0.5, int(st > 0),
      ranks, bad, int(cpu >= 2))
PYEOF
)
[ "$got" = "1 True 1 [0, 1] 0 1" ] && ok "recorded: learning_rate and step_time_ms per report; system metrics of ranks 0 and 1 (RSS > 1 MiB, 0 <= CPU <= 100 x cores)" ||
    fail "recorded: learning rate, step time, system metrics per rank" "got '$got'"

# rows a real run does not make: a hostile name, an id with quotes and markup, a
# failed run with its events, a running one under SLURM
$PY - "$DB" <<'PYEOF'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
t0 = 1764000000.0
rows = [("20261124-xss", "<script>alert(1)</script>", "failed", None, t0, t0 + 50),
        ("x\"'><img src=x onerror=alert(2)>", "quotes", "completed", None, t0 + 100, t0 + 200),
        ("20261124-slurm", "on-slurm", "running", "4242", t0 + 300, None)]
for rid, name, status, job, s, e in rows:
    db.execute("INSERT INTO runs (id, name, status, config, hosts, nodes, workers, slurm_job_id, start_time,"
               " end_time, reason) VALUES (?, ?, ?, ?, 'n1,n2', 2, 8, ?, ?, ?, ?)",
               (rid, name, status, json.dumps({"lr": 0.5, "note": "<b>bold</b>"}), job, s, e,
                "rank 3 on n2 exited 1" if status == "failed" else None))
    for step in range(0, 50, 10):
        db.execute("INSERT INTO metrics VALUES (?, ?, 'loss', ?, ?)", (rid, step, 1.0 / (1 + step), s + step))
db.execute("INSERT INTO events VALUES ('20261124-xss', ?, 'failed', ?)",
           (t0 + 50, json.dumps({"rank": 3, "host": "n2", "reason": "<exit 1>"})))
db.execute("INSERT INTO processes VALUES ('20261124-xss', 0, 3, 'n2', 99, 1, NULL, ?, ?)", (t0, t0 + 50))
db.commit()
PYEOF
ok "add a hostile name, a quoted id, a failed and a running run"
$T runs tag real baseline lr-0.5 --db "$DB" >/dev/null 2>&1 && $T runs note real "the first one" --db "$DB" >/dev/null 2>&1 &&
    ok "tag and note the real run" || fail "tag and note the real run"

# serve ARGS...: starts a server in the background on a free port; sets URL (empty
# when it did not come up) and SPID
serve() {
    local out=$TMP/serve.$RANDOM
    "$@" >"$out.out" 2>"$out.err" &
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
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
jsoneq() { # NAME URL CLI...: the JSON at URL equals the CLI's (duration_s of running runs aside)
    local name=$1 url=$2; shift 2
    curl -sf "$url" >a.json && "$@" >b.json 2>b.err
    if $PY - a.json b.json <<'PYEOF'; then ok "$name"; else fail "$name" "$(head -c 400 a.json) vs $(head -c 400 b.json)"; fi
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
def norm(x):
    if isinstance(x, list):
        for r in x:
            if isinstance(r, dict) and r.get("status") == "running":
                r.pop("duration_s", None)
    return x
sys.exit(0 if norm(a) == norm(b) and a is not None else 1)
PYEOF
}
sha() { sha256sum "$DB" | cut -d' ' -f1; }

serve $T runs serve --db "$DB" --listen 127.0.0.1:0
if [ -z "$URL" ]; then
    fail "serve starts on 127.0.0.1:0 and says where" "$(cat "$SERR")"
    done_testing
fi
ok "serve starts on 127.0.0.1:0 and says where ($URL)"
before=$(sha)

# ---- pages ------------------------------------------------------------------------------------
h=$(curl -s -D headers.txt "$URL/")
echo "$h" | grep -q 'id="runs"' && grep -qi '^content-type: text/html' headers.txt &&
    grep -qi "^content-security-policy: default-src 'self'; script-src 'self'" headers.txt &&
    grep -qi '^x-content-type-options: nosniff' headers.txt && ok "/: the runs page, with CSP and nosniff" ||
    fail "/: the runs page, with CSP and nosniff" "$(cat headers.txt)"
[ "$(code "$URL/compare?run=a&run=b")" = 200 ] && ok "/compare: 200" || fail "/compare: 200"
h=$(curl -s "$URL/run/$RID")
echo "$h" | grep -q "data-run=\"$RID\"" && echo "$h" | grep -q 'id="chart-loss"' && ok "/run/ID: the run page" ||
    fail "/run/ID: the run page" "$h"
for id in chart-learning_rate chart-step_time_ms smooth logscale markers chart-sys-cpu chart-sys-rss chart-sys-gpu_mem sysmetrics; do
    echo "$h" | grep -q "id=\"$id\"" || { fail "/run/ID: the element #$id"; continue; }
    ok "/run/ID: the element #$id"
done
[ "$(code "$URL/static/app.js")" = 200 ] && [ "$(code "$URL/static/style.css")" = 200 ] &&
    curl -s "$URL/static/app.js" | grep -q textContent && ok "/static/app.js and style.css" ||
    fail "/static/app.js and style.css"
if [ -f /usr/share/javascript/dygraphs/dygraph.min.js ]; then
    curl -s "$URL/static/dygraph.min.js" >dy.js
    cmp -s dy.js /usr/share/javascript/dygraphs/dygraph.min.js && [ "$(code "$URL/static/dygraph.min.css")" = 200 ] &&
        ok "/static/dygraph.min.js is the installed libjs-dygraphs" || fail "/static/dygraph.min.js is the installed libjs-dygraphs"
else
    skip "/static/dygraph.min.js is the installed libjs-dygraphs" "libjs-dygraphs is not installed"
fi
[ "$(code "$URL/healthz")" = 200 ] && ok "/healthz" || fail "/healthz"

# ---- JSON equals the CLI's ------------------------------------------------------------------------
jsoneq "/api/runs = runs list --json" "$URL/api/runs" $T runs list --db "$DB" --json
jsoneq "/api/runs?limit=0 = runs list --json --limit 0" "$URL/api/runs?limit=0" $T runs list --db "$DB" --json --limit 0
jsoneq "/api/runs?status=failed = runs list --json --status failed" "$URL/api/runs?status=failed" \
    $T runs list --db "$DB" --json --status failed
jsoneq "/api/runs/ID/metrics?name=loss = runs metrics ID --name loss --json" "$URL/api/runs/$RID/metrics?name=loss" \
    $T runs metrics "$RID" --db "$DB" --name loss --json
jsoneq "/api/runs/ID/metrics = runs metrics ID --json" "$URL/api/runs/$RID/metrics" $T runs metrics "$RID" --db "$DB" --json
jsoneq "/api/runs/ID = runs show ID --json" "$URL/api/runs/$RID" $T runs show "$RID" --db "$DB" --json
jsoneq "/api/runs/ID/export = runs export ID --format json" "$URL/api/runs/$RID/export" \
    $T runs export "$RID" --db "$DB" --format json
curl -s "$URL/api/runs/$RID/sysmetrics" | $PY -c '
import json,sys; a=json.load(sys.stdin); assert sorted({r["rank"] for r in a})==[0,1] and all(set(r)=={"seq","rank","time","step","cpu_pct","rss_bytes","gpu_util","gpu_mem_bytes"} and r["rss_bytes"]>1<<20 for r in a), a' &&
    curl -s "$URL/api/runs/$RID/sysmetrics" | $PY -c '
import json,subprocess,sys; a=json.load(sys.stdin); s=[r["seq"] for r in a]; assert s==sorted(s) and len(set(s))==len(s), s; print(s[0])' >seq0 &&
    [ "$(curl -s "$URL/api/runs/$RID/sysmetrics?after=$(cat seq0)" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')" = \
      "$(( $(curl -s "$URL/api/runs/$RID/sysmetrics" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))') - 1 ))" ] &&
    curl -s "$URL/api/runs/$RID" | $PY -c '
import json,sys; s=json.load(sys.stdin)["sysmetrics_summary"]; assert [r["rank"] for r in s]==[0,1] and all(r["peak_rss_bytes"]>1<<20 and r["samples"]>=1 for r in s), s' &&
    ok "/api/runs/ID/sysmetrics: every sample of ranks 0 and 1 in order (?after=SEQ: the later ones); /api/runs/ID: their summary" ||
    fail "/api/runs/ID/sysmetrics and the summary" "$(curl -s "$URL/api/runs/$RID/sysmetrics" | head -c 400)"
jsoneq "/api/runs?filter=..&filter=.. = runs list --filter .. --filter .." \
    "$URL/api/runs?filter=learning_rate%3E%3D0.5&filter=tag%3Dbaseline" \
    $T runs list --db "$DB" --json --filter 'learning_rate>=0.5' --filter tag=baseline
jsoneq "/api/runs?columns=..&sort=-.. = runs list --columns .. --sort -.." \
    "$URL/api/runs?columns=name,learning_rate,auc,tags&sort=-auc&limit=0" \
    $T runs list --db "$DB" --json --columns name,learning_rate,auc,tags --sort -auc --limit 0
curl -s "$URL/api/runs?filter=tag%3Dbaseline&columns=name,learning_rate,tags" | $PY -c '
import json,sys; a=json.load(sys.stdin); assert a==[{"id":sys.argv[1],"name":"real","learning_rate":0.5,"tags":["baseline","lr-0.5"]}], a' \
    "$RID" && ok "/api/runs?filter=tag=..&columns=..: the tagged run, its parameter as a number" ||
    fail "/api/runs?filter=tag=..&columns=..: the tagged run, its parameter as a number"
curl -s "$URL/api/runs?columns=name&sort=name&limit=0" | $PY -c '
import json,sys; a=[r["name"] for r in json.load(sys.stdin)]; assert a==sorted(a), a' && ok "/api/runs?sort=name: sorted" ||
    fail "/api/runs?sort=name: sorted"
b=$(curl -s -w ' %{http_code}' "$URL/api/runs?filter=lerning_rate%3E0.1")
echo "$b" | grep -q "no run has a field, parameter or final metric 'lerning_rate'" && echo "$b" | grep -q "hint: close keys: learning_rate (parameter)" &&
    [ "${b##* }" = 400 ] && ok "/api/runs?filter=<unknown key>: 400, named, with close keys" ||
    fail "/api/runs?filter=<unknown key>: 400, named, with close keys" "$b"
[ "$(code "$URL/api/runs?filter=auc%3Eabc")" = 400 ] && [ "$(code "$URL/api/runs?columns=nope")" = 400 ] &&
    [ "$(code "$URL/api/runs?sort=-nope")" = 400 ] && ok "/api/runs: a bad filter, column or sort: 400" ||
    fail "/api/runs: a bad filter, column or sort: 400"
jsoneq "/api/compare?run=A&run=B = runs compare A B --json" "$URL/api/compare?run=$RID&run=20261124-xss" \
    $T runs compare "$RID" 20261124-xss --db "$DB" --json
curl -s "$URL/api/compare?run=$RID&run=20261124-xss" | $PY -c '
import json,sys; j=json.load(sys.stdin); d=j["config_diff"]
assert "learning_rate" in d and "lr" in d and d["lr"]==[None,0.5] and j["final_metrics"]["auc"][1] is None, j
assert j["config_equal"]==0 and j["runs"][0]["tags"]==["baseline","lr-0.5"], j' &&
    ok "/api/compare: the config keys that differ, final metrics per run, tags" ||
    fail "/api/compare: the config keys that differ, final metrics per run, tags"
[ "$(code "$URL/api/compare?run=nope&run=$RID")" = 404 ] && [ "$(code "$URL/api/compare")" = 400 ] &&
    ok "/api/compare: an unknown run 404, none 400" || fail "/api/compare: an unknown run 404, none 400"
h=$(curl -s "$URL/")
echo "$h" | grep -q 'id="filter-expr"' && echo "$h" | grep -q 'id="columns"' && curl -s "$URL/compare?run=a" | grep -q 'id="config-diff"' &&
    curl -s "$URL/run/$RID" | grep -q 'id="run-tags"' && ok "the pages: a filter box, a column chooser, the config diff, tags" ||
    fail "the pages: a filter box, a column chooser, the config diff, tags"
n=$(curl -s "$URL/api/runs/$RID/metrics?name=loss" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')
nl=$($PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(\"select count(*) from metrics where run=? and name='loss'\", (sys.argv[2],)).fetchone()[0])" "$DB" "$RID")
[ "$n" = "$nl" ] && [ "$n" -gt 5 ] && ok "metrics?name=loss: every loss row ($n)" || fail "metrics?name=loss: every loss row" "$n vs $nl"
curl -s "$URL/api/runs/$RID/metrics?name=loss&after=30" | $PY -c '
import json,sys; a=json.load(sys.stdin); assert a and all(r["step"] > 30 and r["name"] == "loss" for r in a), a' &&
    ok "metrics?after=30: only later steps" || fail "metrics?after=30: only later steps"
curl -s "$URL/api/runs?name=slurm" | $PY -c '
import json,sys; a=json.load(sys.stdin); assert [r["id"] for r in a]==["20261124-slurm"] and a[0]["slurm_job_id"]=="4242" and a[0]["nodes"]==2 and a[0]["workers"]==8, a' &&
    ok "/api/runs?name=: a part of the name; SLURM job, nodes, workers" || fail "/api/runs?name=: a part of the name"
curl -s "$URL/api/runs/20261124-xss" | $PY -c '
import json,sys; j=json.load(sys.stdin); assert j["events"][0]["kind"]=="failed" and j["events"][0]["data"]["rank"]==3 and j["processes"][0]["ended"]=="exit 1", j' &&
    ok "/api/runs/ID: events (failed rank) and processes" || fail "/api/runs/ID: events (failed rank) and processes"

# ---- bad ids, injections, methods -------------------------------------------------------------------
for u in "/api/runs/nope" "/run/nope" "/api/runs/$RID/bogus" "/nothing" "/api/runs/%27%20OR%201%3D1%20--" \
    "/api/runs/x%27%20OR%20%271%27%3D%271/metrics" "/run/%27%3B%20DROP%20TABLE%20runs%3B%20--" \
    "/api/runs/$RID%27%20OR%20%271%27%3D%271" "/run/$RID/x" "/api/runs/"; do
    c=$(code "$URL$u")
    [ "$c" = 404 ] && ok "404: $u" || fail "404: $u" "got $c"
done
for u in "/api/runs?status=%27%20OR%201%3D1%20--" "/api/runs?name=%25%27%20OR%20%271%27%3D%271" \
    "/api/runs?filter=name%3Dx%27%20OR%20%271%27%3D%271" "/api/runs?filter=note~%27)%20OR%201%3D1%20--%27" \
    "/api/runs/$RID/metrics?name=%27%20OR%201%3D1%20--"; do
    b=$(curl -s "$URL$u")
    [ "$b" = "[]" ] && ok "an injection in a filter finds nothing: $u" || fail "an injection in a filter finds nothing: $u" "$b"
done
for u in "/api/runs?limit=abc" "/api/runs?limit=-1" "/api/runs/$RID/metrics?after=1%3B" "/api/runs/$RID/metrics?after=-5" \
    "/api/runs/$RID/sysmetrics?after=x"; do
    c=$(code "$URL$u")
    [ "$c" = 400 ] && ok "400: $u" || fail "400: $u" "got $c"
done
for m in POST PUT DELETE PATCH; do
    c=$(code -X $m --data 'x=1' "$URL/api/runs/$RID")
    [ "$c" = 405 ] && ok "$m: 405 (read-only)" || fail "$m: 405 (read-only)" "got $c"
done
[ "$(sha)" = "$before" ] && $T runs list --db "$DB" --limit 0 | grep -q 20261124-xss &&
    ok "the history is byte for byte the same after all that" || fail "the history is byte for byte the same"

# ---- escaping -----------------------------------------------------------------------------------------
h=$(curl -s "$URL/run/20261124-xss")
echo "$h" | grep -q '&lt;script&gt;alert(1)&lt;/script&gt;' && ! echo "$h" | grep -q '<script>alert' &&
    ok "a run named <script>: escaped in the run page" || fail "a run named <script>: escaped in the run page" "$h"
h=$(curl -s "$URL/run/x%22%27%3E%3Cimg%20src%3Dx%20onerror%3Dalert(2)%3E")
echo "$h" | grep -q 'data-run="x&quot;&#39;&gt;&lt;img src=x onerror=alert(2)&gt;"' && ! echo "$h" | grep -q '<img' &&
    ok "an id with quotes and markup: escaped in attributes and text" || fail "an id with quotes and markup: escaped" "$h"
curl -s "$URL/api/runs/x%22%27%3E%3Cimg%20src%3Dx%20onerror%3Dalert(2)%3E" | $PY -c '
import json,sys; j=json.load(sys.stdin); assert j["run"]["id"]=="x\"'"'"'><img src=x onerror=alert(2)>", j' &&
    ok "the same id through /api/runs/ID (percent-encoded)" || fail "the same id through /api/runs/ID"
ct=$(curl -s -o /dev/null -w '%{content_type}' "$URL/api/runs")
[ "$ct" = application/json ] && ok "/api/ answers application/json" || fail "/api/ answers application/json" "$ct"
kill "$SPID"; wait "$SPID" 2>/dev/null

# ---- dygraphs missing ----------------------------------------------------------------------------------
TR_DYGRAPHS_DIR=$TMP/none serve $T runs serve --db "$DB" --listen 127.0.0.1:0
b=$(curl -s "$URL/static/dygraph.min.js")
[ "$(code "$URL/static/dygraph.min.js")" = 404 ] && echo "$b" | grep -q 'not installed.*libjs-dygraphs' &&
    grep -q "libjs-dygraphs" "$SERR" &&
    ok "no dygraphs: 404 naming the package, and a warning at start" || fail "no dygraphs: 404 naming the package" "$b / $(cat "$SERR")"
kill "$SPID"; wait "$SPID" 2>/dev/null

# ---- token ---------------------------------------------------------------------------------------------
printf 's3cret-token\n' >tok
chmod 600 tok
serve $T runs serve --db "$DB" --listen 127.0.0.1:0 --token-file tok  # the issue spells it with a dash
[ "$(code "$URL/api/runs")" = 401 ] && [ "$(code -H 'Authorization: Bearer wrong' "$URL/api/runs")" = 401 ] &&
    [ "$(code -H 'Authorization: Bearer s3cret-token-longer' "$URL/")" = 401 ] &&
    [ "$(code "$URL/?token=s3cret-toke")" = 401 ] && ok "--token_file: none, wrong, longer, shorter: 401" ||
    fail "--token_file: none, wrong, longer, shorter: 401"
[ "$(code -H 'Authorization: Bearer s3cret-token' "$URL/api/runs")" = 200 ] && ok "--token_file: Bearer passes" ||
    fail "--token_file: Bearer passes"
curl -s -D h2.txt -o /dev/null "$URL/?token=s3cret-token"
grep -qi '^set-cookie: tr_token=s3cret-token; Path=/; HttpOnly; SameSite=Strict' h2.txt &&
    [ "$(code -b 'tr_token=s3cret-token' "$URL/api/runs/$RID")" = 200 ] &&
    ok "--token_file: ?token= sets an HttpOnly cookie, the cookie passes" || fail "--token_file: ?token= and the cookie" "$(cat h2.txt)"
kill "$SPID"; wait "$SPID" 2>/dev/null
serve $T runs serve --db "$DB" --listen 0.0.0.0:0 --token_file tok
[ -n "$URL" ] && [ "$(code "${URL/0.0.0.0/127.0.0.1}/api/runs")" = 401 ] &&
    [ "$(code -H 'Authorization: Bearer s3cret-token' "${URL/0.0.0.0/127.0.0.1}/api/runs")" = 200 ] &&
    ok "--listen 0.0.0.0 with a token: serves, token required" || fail "--listen 0.0.0.0 with a token" "$(cat "$SERR")"
kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null

bad() { # NAME PATTERN ARGS...: exit 2 with a line matching PATTERN
    local name=$1 pat=$2; shift 2
    local out rc
    out=$(timeout 10 $T runs serve "$@" 2>&1 </dev/null)
    rc=$?
    if [ $rc -eq 2 ] && echo "$out" | grep -q -- "$pat"; then ok "$name"; else fail "$name" "rc=$rc: $out"; fi
}
bad "beyond loopback without a token: refused" "not a loopback address.*--token_file" --db "$DB" --listen 0.0.0.0:0
bad "a bad --listen" "--listen: 'nope' is not ADDR:PORT" --db "$DB" --listen nope
bad "a missing --token_file" "--token_file" --db "$DB" --token_file "$TMP/no-such-token"
bad "no history" "no run history at '$TMP/none.db'" --db "$TMP/none.db"
bad "an argument" "unexpected argument 'x'" --db "$DB" x
[ ! -e "$TMP/none.db" ] && ok "serve does not create a history" || fail "serve does not create a history"

# ---- live: a run writing while the server reads --------------------------------------------------------
serve $T runs serve --db "$DB" --listen 127.0.0.1:0
$T train --db "$DB" --workers 2 $M --max_steps 600 --print_freq 10 --name live >live.out 2>&1 &
TPID=$!
PIDS+=("$TPID")
LID="" seen=0 grew=0
for _ in $(seq 300); do
    LID=$(curl -s "$URL/api/runs?name=live&status=running" | $PY -c 'import json,sys; a=json.load(sys.stdin); print(a[0]["id"] if a else "")')
    if [ -n "$LID" ]; then
        n1=$(curl -s "$URL/api/runs/$LID/metrics?name=loss" | $PY -c 'import json,sys; a=json.load(sys.stdin); print(len(a), a[-1]["step"] if a else -1)')
        if [ "${n1%% *}" -gt 0 ]; then
            seen=1
            sleep 1.5
            n2=$(curl -s "$URL/api/runs/$LID/metrics?name=loss&after=${n1##* }" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')
            [ "$n2" -gt 0 ] && grew=1
            break
        fi
    fi
    sleep 0.1
done
[ $seen = 1 ] && [ $grew = 1 ] && ok "live: a running run's metrics grow between two reads (?after=)" ||
    fail "live: a running run's metrics grow between two reads" "seen=$seen grew=$grew $(tail -n 3 live.out)"
wait "$TPID"
rc=$?
st=$(curl -s "$URL/api/runs?name=live" | $PY -c 'import json,sys; print(json.load(sys.stdin)[0]["status"])')
[ $rc = 0 ] && [ "$st" = completed ] && ok "the run completes while served (not blocked by the reader)" ||
    fail "the run completes while served" "rc=$rc status=$st $(tail -n 3 live.out)"
kill "$SPID"
wait "$SPID" 2>/dev/null
rc=$?
[ $rc = 0 ] && grep -q "stopped (SIGTERM)" "$SERR" && ok "SIGTERM stops the server: exit 0 (no leaks under ASan)" ||
    fail "SIGTERM stops the server: exit 0" "rc=$rc $(tail -n 20 "$SERR")"

done_testing
