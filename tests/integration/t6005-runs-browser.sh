#!/usr/bin/env bash
# t6005: the pages of `terarec runs serve` in a real browser (Debian's chromium,
# headless), on a history filled by a real `terarec train` run (and a run named
# <script>, written with python3's sqlite3): after the pages' scripts have run,
# the DOM holds one row per run with the hostile name as text, and the run page's
# charts hold as many points as SQLite has rows (loss, samples/s, AUC, logloss),
# its checkpoints, processes, events and lineage; a running run's page says it is live
# (polling); the compare page overlays two runs and shows their config diff and
# final metrics; the list filters by tag and shows chosen columns, sorted, and
# tags; a run's header its tags and note. The run page's views: learning rate and
# step time, evaluation/resume/preemption/restart/resized markers with titles, the attempts with their worlds, each
# rank's CPU and RSS, EMA smoothing and log scale (?smooth=&log=1), a resumed
# chain drawn as one curve, a one-point chart.
# Screenshots of the run page (whole, smoothed on a log scale, a resumed chain,
# one point), the list, the list with chosen columns and tags, and the compare
# page go to $TR_BUILD/runs-serve-*.png.
# Skipped only when chromium is not installed (not in CI, where it must run).
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
PY=/usr/bin/python3
use_mpi
cd "$TMP" || exit 1
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
    if [ -n "${CI:-}" ]; then
        fail "chromium is installed (CI)" "install it: make deps (tools/deps.sh chromium libjs-dygraphs)"
    else
        skip "the pages in headless chromium" "chromium is not installed (make deps installs it)"
    fi
    done_testing
fi
if [ ! -f /usr/share/javascript/dygraphs/dygraph.min.js ]; then
    fail "libjs-dygraphs is installed" "make deps installs it (tools/deps.sh libjs-dygraphs)"
    done_testing
fi
DB=$TMP/hist/runs.db
M="--batch_size 256 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --threads 1 --synthetic_dataset_valid_batches 2"
SPID=""
trap '[ -n "$SPID" ] && kill "$SPID" 2>/dev/null; rm -rf "$TMP"' EXIT

for r in first second; do
    if ! $T train --db "$DB" --workers 2 $M --max_steps 80 --print_freq 5 --checkpoint_every 40 --name "$r" \
        --learning_rate $([ $r = first ] && echo 0.5 || echo 0.2) >"train-$r.out" 2>&1; then
        fail "real training run '$r'" "$(tail -n 5 "train-$r.out")"
        done_testing
    fi
done
ok "two real training runs fill the history"
$PY - "$DB" <<'PYEOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("INSERT INTO runs (id, name, status, nodes, workers, start_time, end_time) VALUES"
           " ('20261124-xss', '<script>document.title=\"pwned\"</script>', 'failed', 1, 1, 1764000000, 1764000010)")
db.execute("INSERT INTO runs (id, name, status, nodes, workers, slurm_job_id, start_time) VALUES"
           " ('20261124-live', 'still-going', 'running', 2, 16, '777', 1764000100)")
db.execute("INSERT INTO runs (id, name, status, nodes, workers, start_time, end_time, restarts, resumed_from)"
           " VALUES ('20261124-child', 'resumed-child', 'completed', 1, 2, 1764000200, 1764000300, 1,"
           " (SELECT id FROM runs WHERE name = 'first'))")
for step in range(10, 70, 10):
    db.execute("INSERT INTO metrics VALUES ('20261124-live', ?, 'loss', ?, ?)", (step, 1.0 / step, 1764000100 + step))
# the child goes on from the checkpoint of step 40 of 'first' (steps 45 .. 100), with
# a preemption and a restart on its way; a run of one point
first = db.execute("SELECT id FROM runs WHERE name = 'first'").fetchone()[0]
db.execute("INSERT INTO events VALUES ('20261124-child', 1764000200, 'started', '{\"attempt\":0,\"from_step\":40}')")
for step in range(45, 105, 5):
    db.execute("INSERT INTO metrics VALUES ('20261124-child', ?, 'loss', ?, ?)", (step, 0.5 - step / 1000, 1764000200 + step))
db.execute("INSERT INTO events VALUES ('20261124-child', 1764000262, 'preempt_signal', '{\"signal\":\"SIGTERM\"}')")
db.execute("INSERT INTO events VALUES ('20261124-child', 1764000271, 'restarted', '{\"attempt\":1,\"from_step\":60}')")
# ... and an elastic change of world: rank 1 lost at step 85, one worker from the checkpoint of step 80
db.execute("INSERT INTO events VALUES ('20261124-child', 1764000285, 'resized', '{\"why\":\"lost\",\"attempt\":1,"
           "\"lost\":{\"rank\":1,\"host\":\"h\",\"slot\":\"slot 1\",\"how\":\"was killed by signal 9 (Killed)\"},"
           "\"world_before\":2,\"world\":1,\"step\":85,\"from_step\":80,\"time_lost_s\":1.25}')")
db.execute("INSERT INTO events VALUES ('20261124-child', 1764000286, 'restarted', '{\"attempt\":2,\"workers\":1,\"from_step\":80}')")
for a, ranks, t in ((0, 2, 1764000200), (1, 2, 1764000271), (2, 1, 1764000286)):
    for r in range(ranks):
        db.execute("INSERT INTO processes VALUES ('20261124-child', ?, ?, 'h', ?, ?, NULL, ?, ?)",
                   (a, r, 100 + 10 * a + r, 0 if a == 2 else None, t, t + 14 if a < 2 else 1764000300))
db.execute("INSERT INTO runs (id, name, status, nodes, workers, start_time, end_time) VALUES"
           " ('20261124-one', 'one-point', 'completed', 1, 1, 1764000400, 1764000410)")
db.execute("INSERT INTO metrics VALUES ('20261124-one', 7, 'loss', 0.6931, 1764000407)")
db.commit()
PYEOF
q() { $PY -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])" "$DB" "$1"; }
R1=$(q "select id from runs where name = 'first'")
R2=$(q "select id from runs where name = 'second'")
$T runs tag first baseline lr-0.5 --db "$DB" >/dev/null && $T runs tag second lr-0.2 --db "$DB" >/dev/null &&
    $T runs note first "the first of two" --db "$DB" >/dev/null || fail "tag and note the runs"

$T runs serve --db "$DB" --listen 127.0.0.1:0 >serve.out 2>serve.err &
SPID=$!
URL=""
for _ in $(seq 100); do
    URL=$(sed -n 's|^terarec runs serve: \(http://[^ ]*\)/ .*|\1|p' serve.out)
    [ -n "$URL" ] && break
    sleep 0.1
done
[ -n "$URL" ] && ok "serve starts ($URL)" || { fail "serve starts" "$(cat serve.err)"; done_testing; }

# chrome ARGS... URL: headless chromium with its own profile, after the page's
# fetches have finished (virtual time)
chrome() {
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$TMP/profile" \
        --virtual-time-budget=5000 --hide-scrollbars "$@" 2>>chrome.err
}

# ---- the list ---------------------------------------------------------------------------------------
chrome --dump-dom "$URL/" >list.html
nruns=$(q "select count(*) from runs")
rows=$(grep -o '<tr class="run-row status-[a-z]*" data-run="[^"]*"' list.html | wc -l)
[ "$rows" = "$nruns" ] && grep -q "data-rows=\"$nruns\"" list.html && ok "list: one row per run in the DOM ($rows)" ||
    fail "list: one row per run in the DOM" "rows=$rows runs=$nruns: $(head -c 2000 list.html)"
grep -q "data-run=\"$R1\"" list.html && grep -q "href=\"/run/$R1\"" list.html && ok "list: rows link to their run pages" ||
    fail "list: rows link to their run pages"
grep -q '&lt;script&gt;document.title="pwned"&lt;/script&gt;' list.html && ! grep -q '<script>document.title' list.html &&
    grep -q '<title>terarec runs</title>' list.html && ok "list: a run named <script> is text, not a script" ||
    fail "list: a run named <script> is text" "$(grep -o '.\{80\}pwned.\{80\}' list.html)"
grep -q 'status-completed' list.html && grep -q '1 node, 2 workers' list.html && grep -q '2 nodes, 16 workers' list.html &&
    ! grep -q '×' list.html && grep -q '<td class="c10">777</td>' list.html &&
    grep -q '<span class="tag" title="only the runs tagged baseline">baseline</span>' list.html &&
    ok "list: status, SLURM job, nodes and workers in words, tags" || fail "list: status, nodes and workers, tags"
chrome --dump-dom "$URL/?status=failed" >failed.html
[ "$(grep -c 'class="run-row' failed.html)" = 1 ] && grep -q 'data-run="20261124-xss"' failed.html &&
    ok "list: ?status=failed filters" || fail "list: ?status=failed filters"
chrome --dump-dom "$URL/?name=sec" >named.html
[ "$(grep -o 'class="run-row[^"]*" data-run="[^"]*"' named.html | wc -l)" = 1 ] && grep -q "data-run=\"$R2\"" named.html &&
    ok "list: ?name= filters" || fail "list: ?name= filters"

chrome --dump-dom "$URL/?filter=tag%3Dbaseline" >tagged.html
[ "$(grep -o 'class="run-row[^"]*" data-run="[^"]*"' tagged.html | wc -l)" = 1 ] && grep -q "data-run=\"$R1\"" tagged.html &&
    ok "list: ?filter=tag=baseline filters" ||
    fail "list: ?filter=tag=baseline filters" "$(grep -o 'class="run-row[^>]*' tagged.html)"
COLS="/?columns=name,learning_rate,auc,tags&sort=-learning_rate&filter=tag~lr-"
chrome --dump-dom "$URL$COLS" >cols.html
order=$(grep -o 'class="run-row[^"]*" data-run="[^"]*"' cols.html | sed 's/.*data-run="//; s/"$//' | tr '\n' ' ')
if [ "$order" = "$R1 $R2 " ] && grep -q '<th class="sortable" data-sort="learning_rate"[^>]*>learning_rate ▼</th>' cols.html &&
    grep -q '<th class="sortable" data-sort="auc"' cols.html && grep -q '<td class="c3">0.5</td>' cols.html &&
    grep -q '<td class="c3">0.2</td>' cols.html; then
    ok "list: chosen columns (a parameter, a final metric, tags), sorted by a parameter (?columns=&sort=)"
else
    fail "list: chosen columns, sorted" "order '$order': $(grep -o '<thead>.*</thead>' cols.html)"
fi
chrome --screenshot="$TR_BUILD/runs-serve-list-columns.png" --window-size=1280,600 "$URL$COLS" >/dev/null

# ---- a run ------------------------------------------------------------------------------------------
chrome --dump-dom "$URL/run/$R1" >run.html
points() { sed -n "s/.*id=\"chart-$1\"[^>]*data-points=\"\([0-9]*\)\".*/\1/p" run.html | head -1; }
for m in loss samples_per_s; do
    want=$(q "select count(*) from metrics where run = '$R1' and name = '$m'")
    got=$(points $m)
    [ -n "$got" ] && [ "$got" = "$want" ] && [ "$want" -gt 5 ] && ok "run: the $m chart has a point per row ($got)" ||
        fail "run: the $m chart has a point per row" "chart ${got:-none}, SQLite $want"
done
for m in auc logloss; do
    want=$(q "select count(*) from evals where run = '$R1' and $m is not null")
    got=$(points $m)
    [ -n "$got" ] && [ "$got" = "$want" ] && [ "$want" -ge 1 ] && ok "run: the $m chart has a point per evaluation ($got)" ||
        fail "run: the $m chart has a point per evaluation" "chart ${got:-none}, SQLite $want"
done
grep -q 'class="dygraph-' run.html && grep -q '<canvas' run.html && ok "run: dygraphs drew (canvas, axes)" ||
    fail "run: dygraphs drew"
grep -q '<span id="run-status" class="status status-completed">completed</span>' run.html && ok "run: its status" ||
    fail "run: its status" "$(grep -o '<span id="run-status"[^<]*' run.html)"
grep -q '<span id="run-tags"><span class="tags"><span class="tag">baseline</span><span class="tag">lr-0.5</span>' run.html &&
    grep -q '<p id="run-note" class="note">the first of two</p>' run.html && grep -q '<th>nodes, workers</th><td>1 node, 2 workers</td>' run.html &&
    ok "run: tags and note in its header; nodes and workers in words" ||
    fail "run: tags and note in its header" "$(grep -o '<h1>.*</p>' run.html | head -c 600)"
nck=$(q "select count(*) from checkpoints where run = '$R1'")
got=$($PY - run.html <<'PYEOF'
import re, sys
h = open(sys.argv[1]).read()
def body(tid):
    m = re.search(r'<table id="%s">.*?<tbody>(.*?)</tbody>' % tid, h, re.S)
    return m.group(1) if m else ""
print(body("checkpoints").count("<tr>"), body("processes").count("<tr>"), int("started" in body("events")),
      int("<th>batch_size</th>" in h), int("committed" in body("checkpoints")))
PYEOF
)
nproc=$(q "select count(*) from processes where run = '$R1'")
[ "$got" = "$nck $nproc 1 1 1" ] && ok "run: checkpoints ($nck), processes ($nproc), events, config" ||
    fail "run: checkpoints, processes, events, config" "got '$got', want '$nck $nproc 1 1 1'"
grep -q '<span class="resumed-by"><a href="/run/20261124-child">20261124-child</a></span>' run.html &&
    ok "run: the runs resumed from it (lineage)" || fail "run: the runs resumed from it (lineage)"
chrome --dump-dom "$URL/run/20261124-child" >child.html
grep -q "<th>resumed from</th><td><a href=\"/run/$R1\">$R1</a></td>" child.html && grep -q '<th>restarts</th><td>1</td>' child.html &&
    ok "run: the run it resumed from, and its restarts" || fail "run: the run it resumed from, and its restarts"
chrome --dump-dom "$URL/run/20261124-live" >live.html
grep -q '<span id="live">live: updating every 3 s</span>' live.html &&
    grep -q 'id="chart-loss"[^>]*data-points="6"' live.html && ok "a running run's page polls (live) and draws its 6 points" ||
    fail "a running run's page polls (live)" "$(grep -o '<span id="live">[^<]*' live.html)"
# the new views: learning rate and step time, markers, each rank's system metrics
for m in learning_rate step_time_ms; do
    want=$(q "select count(*) from metrics where run = '$R1' and name = '$m'")
    got=$(points $m)
    [ -n "$got" ] && [ "$got" = "$want" ] && [ "$want" -gt 5 ] && ok "run: the $m chart has a point per row ($got)" ||
        fail "run: the $m chart has a point per row" "chart ${got:-none}, SQLite $want"
done
attr() { sed -n "s/.*id=\"$2\"[^>]*data-$3=\"\([0-9]*\)\".*/\1/p" "$1" | head -1; }
nev=$(q "select count(*) from evals where run = '$R1'")
[ "$(attr run.html chart-loss markers)" = "$nev" ] && grep -q 'class="marker marker-eval" title="evaluation at step ' run.html &&
    ok "run: an evaluation marker on the loss curve, titled ($nev)" ||
    fail "run: evaluation markers" "markers $(attr run.html chart-loss markers), evals $nev"
for c in cpu rss; do
    want=$(q "select count(distinct time) from sysmetrics where run = '$R1'")
    got=$(attr run.html chart-sys-$c points)
    [ -n "$got" ] && [ "$got" = "$want" ] && grep -q "<span><b>rank 1</b>\|rank 1" run.html &&
        ok "run: the system chart $c, a line per rank ($got times)" || fail "run: the system chart $c" "chart ${got:-none}, SQLite $want"
done
grep -q 'id="box-sys-gpu_mem" style="display: none;"' run.html && grep -q 'no GPU memory recorded' run.html &&
    ok "run: no GPU memory chart without a GPU, and it says why" || fail "run: no GPU memory chart without a GPU"
# smoothing and the log scale, from the page's address
chrome --dump-dom "$URL/run/$R1?smooth=0.9&log=1" >smooth.html
grep -q 'loss (smoothed 0.9)' smooth.html && grep -q 'loss (raw)' smooth.html &&
    [ "$(attr smooth.html chart-loss points)" = "$(points loss)" ] && [ "$(attr smooth.html chart-loss logscale)" = 1 ] &&
    ok "run: ?smooth=0.9&log=1: the raw and the smoothed loss, on a log scale" ||
    fail "run: smoothing and log scale" "$(grep -o 'id="chart-loss-legend".\{300\}' smooth.html)"
# a resumed chain as one curve, with its resume, preemption and restart marked
chrome --dump-dom "$URL/run/20261124-child" >chain.html
want=$(( $(q "select count(*) from metrics where run = '$R1' and name = 'loss' and step <= 40") + 12 ))
[ "$(attr chain.html chart-loss points)" = "$want" ] && grep -q "resumed chain: the curves begin with <a href=\"/run/$R1\">$R1</a> (to step 40)" chain.html &&
    ok "run: a resumed chain is one curve ($want points: the parent's to step 40, then its own)" ||
    fail "run: a resumed chain is one curve" "points $(attr chain.html chart-loss points), want $want"
grep -q 'class="marker marker-started" title="resumed from the checkpoint of step 40' chain.html &&
    grep -q 'class="marker marker-preempt_signal" title="preempt signal' chain.html &&
    grep -q 'class="marker marker-restarted" title="restarted from the checkpoint of step 60' chain.html &&
    ok "run: resume, preemption and restart marked on the curves, with titles" ||
    fail "run: resume, preemption and restart markers" "$(grep -o 'class="marker[^>]*>' chain.html | head)"
grep -q 'class="marker marker-resized" title="workers 2 → 1: rank 1 (slot 1) was killed by signal 9 (Killed); from the checkpoint of step 80; 1.25 s lost' chain.html &&
    ok "run: an elastic change of world (resized) marked where the new world starts, titled" ||
    fail "run: the resized marker" "$(grep -o 'class="marker[^>]*>' chain.html | head)"
att=$($PY - chain.html <<'PYEOF'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r'<table id="attempts">(.*?)</table>', t, re.S)
rows = re.findall(r'<tr>(.*?)</tr>', m.group(1), re.S) if m else []
print(" ".join(":".join(c[i] for i in (0, 1, 4)) for c in (re.findall(r'<td>(.*?)</td>', r) for r in rows) if len(c) > 4))
PYEOF
)
[ "$att" = "0:2:40 1:2:60 2:1:80" ] && ok "run: the attempts table lists each attempt's world and its start step ($att)" ||
    fail "run: the attempts table" "'$att': $(grep -o '<table id="attempts">.\{600\}' chain.html)"
chrome --dump-dom "$URL/run/20261124-one" >one.html
[ "$(attr one.html chart-loss single)" = 1 ] && [ "$(attr one.html chart-loss points)" = 1 ] &&
    ok "run: a one-point chart is drawn as a lone point" || fail "run: a one-point chart" "$(grep -o 'id="chart-loss"[^>]*' one.html)"
chrome --screenshot="$TR_BUILD/runs-serve-run.png" --window-size=1280,2200 "$URL/run/$R1" >/dev/null
chrome --screenshot="$TR_BUILD/runs-serve-list.png" --window-size=1600,700 "$URL/" >/dev/null
chrome --screenshot="$TR_BUILD/runs-serve-run-smooth-log.png" --window-size=1280,900 "$URL/run/$R1?smooth=0.9&log=1" >/dev/null
chrome --screenshot="$TR_BUILD/runs-serve-run-chain.png" --window-size=1280,900 "$URL/run/20261124-child" >/dev/null
chrome --screenshot="$TR_BUILD/runs-serve-run-one-point.png" --window-size=1280,900 "$URL/run/20261124-one" >/dev/null
for f in run list run-smooth-log run-chain run-one-point; do
    p=$TR_BUILD/runs-serve-$f.png
    if [ -s "$p" ] && [ "$(head -c 8 "$p" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] &&
        [ "$(stat -c %s "$p")" -gt 10000 ]; then
        ok "screenshot of the $f page: $p"
    else
        fail "screenshot of the $f page: $p" "$(tail -n 5 chrome.err)"
    fi
done

# ---- compare ----------------------------------------------------------------------------------------
chrome --dump-dom "$URL/compare?run=$R1&run=$R2" >cmp.html
want=$(q "select count(distinct step) from metrics where run in ('$R1', '$R2') and name = 'loss'")
got=$(sed -n 's/.*id="chart-compare"[^>]*data-points="\([0-9]*\)".*/\1/p' cmp.html | head -1)
[ -n "$got" ] && [ "$got" = "$want" ] && grep -q "$R2 (second)" cmp.html && grep -q "href=\"/run/$R1\"" cmp.html &&
    ok "compare: both runs' loss on one chart ($got steps)" || fail "compare: both runs' loss on one chart" "chart ${got:-none}, want $want"
if grep -q '<h2 id="config-diff-title">config: 2 differ, [0-9]* the same</h2>' cmp.html &&
    grep -q '<tr><td>learning_rate</td><td>0.5</td><td>0.2</td></tr>' cmp.html &&
    grep -q '<table id="compare-metrics">.*<td>auc</td>' cmp.html; then
    ok "compare: the config diff (learning_rate and the name differ) and the final metrics"
else
    fail "compare: the config diff and the final metrics" "$(grep -o '<h2 id="config-diff-title">.*' cmp.html | head -c 1500)"
fi
chrome --screenshot="$TR_BUILD/runs-serve-compare.png" --window-size=1280,1100 "$URL/compare?run=$R1&run=$R2" >/dev/null
for f in compare list-columns; do
    p=$TR_BUILD/runs-serve-$f.png
    [ -s "$p" ] && [ "$(stat -c %s "$p")" -gt 10000 ] && ok "screenshot of the $f page: $p" ||
        fail "screenshot of the $f page: $p" "$(tail -n 5 chrome.err)"
done

done_testing
