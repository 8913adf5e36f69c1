#!/usr/bin/env bash
# t3001: terarec-ckpt, the checkpoint store over HTTP, driven with curl on
# loopback: health and metrics; chunks put, checked, got whole and by range; a
# wrong hash, a missing or wrong token, path traversal and an oversized body are
# refused with nothing written; manifests need their chunks, a commit its
# manifest; LATEST is replaced atomically; listings and gc. Bad flags exit 2 in
# one line. A server killed with kill -9 in the middle of a commit
# (TR_CKPT_FAULT_COMMIT_DELAY_MS) leaves LATEST at the previous step, a restarted
# server serves it, and gc removes the temporary file left behind.
. "$(dirname "$0")/lib.sh"
S=$TR_BIN/terarec-ckpt
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1
command -v curl >/dev/null || { skip "all" "curl is not installed"; done_testing; }

printf 'sekrit-token\n' >tok
ROOT=$TMP/root
AUTH="Authorization: Bearer sekrit-token"

# start_server NAME [FLAGS...]: starts it in the background; sets PID, PORT, URL
start_server() {
    local name=$1 i
    shift
    "$S" --root "$ROOT" --token_file tok "$@" >"$name.out" 2>"$name.err" &
    PID=$!
    PIDS+=("$PID")
    for i in $(seq 100); do
        grep -q '^terarec-ckpt: listening on http://' "$name.out" 2>/dev/null && break
        sleep 0.1
    done
    URL=$(sed -n 's/^terarec-ckpt: listening on \(http:.*\)$/\1/p' "$name.out")
    PORT=${URL##*:}
    [ -n "$URL" ]
}
# code METHOD PATH [CURL ARGS...]: prints the HTTP status (body in last.body)
code() {
    local m=$1 p=$2
    shift 2
    curl -s --path-as-is -o last.body -w '%{http_code}' -X "$m" "$@" "$URL$p"
}
files() { (cd "$ROOT" && find . -type f | sort); }
# expect NAME WANT GOT
expect() { [ "$2" = "$3" ] && ok "$1" || fail "$1" "want '$2', got '$3' ($(head -c 200 last.body 2>/dev/null))"; }
# nothing_new NAME: the root holds the files it held at the last snapshot
snap() { files >before.txt; }
nothing_new() { files >after.txt; cmp -s before.txt after.txt && ok "$1: nothing written" ||
    fail "$1: nothing written" "$(diff before.txt after.txt | head -5)"; }
metric() { curl -s -H "$AUTH" "$URL/metrics" | awk -v k="$1" '$1 == k { print $2 }'; }
# hash FILE: the xxh3-128 name of its bytes, through a PUT to a wrong name (the
# server's 400 log line names it) -- no other tool here computes xxh3-128
hash_of() {
    code PUT /chunks/00000000000000000000000000000000 -H "$AUTH" --data-binary @"$1" >/dev/null
    sed -n "s/.*chunk '00000000000000000000000000000000': its [0-9]* bytes hash to '\([0-9a-f]*\)'.*/\1/p" \
        main.err | tail -1
}

if ! start_server main --threads 4 --max_body 64K; then
    fail "server starts" "$(cat main.out main.err)"
    done_testing
fi
ok "server starts on $URL"
case $URL in http://127.0.0.1:[0-9]*) ok "binds loopback, a system-chosen port" ;; *) fail "binds loopback" "$URL" ;; esac

expect "healthz" 200 "$(code GET /healthz -H "$AUTH")"
expect "healthz says ok" ok "$(cat last.body)"
m0=$(metric 'terarec_ckpt_requests_total{route="healthz",method="GET",code="200"}')
code GET /healthz -H "$AUTH" >/dev/null
m1=$(metric 'terarec_ckpt_requests_total{route="healthz",method="GET",code="200"}')
[ "$m0" = 1 ] && [ "$m1" = 2 ] && ok "metrics count requests" || fail "metrics count requests" "$m0 $m1"
curl -s -H "$AUTH" "$URL/metrics" >metrics.txt
for k in requests_total errors_total refused_total bytes_in_total bytes_out_total chunks_stored_total; do
    grep -q "^# TYPE terarec_ckpt_$k counter" metrics.txt || { fail "metrics: $k typed" "$(head metrics.txt)"; continue; }
    grep -q "^# HELP terarec_ckpt_$k " metrics.txt && ok "metrics: $k with HELP and TYPE" || fail "metrics: $k HELP"
done

# ---- chunks
head -c 10000 /dev/urandom >c1
H1=$(hash_of c1)
[ ${#H1} -eq 32 ] && ok "the hash of a chunk (from the refusal)" || fail "hash of c1" "$(tail -3 main.err)"
stored0=$(metric terarec_ckpt_chunks_stored_total)
expect "HEAD of a missing chunk" 404 "$(code HEAD /chunks/$H1 -H "$AUTH" -I)"
snap
expect "PUT chunk, wrong hash" 400 "$(code PUT /chunks/ffffffffffffffffffffffffffffffff -H "$AUTH" --data-binary @c1)"
nothing_new "wrong hash"
expect "PUT chunk" 201 "$(code PUT /chunks/$H1 -H "$AUTH" --data-binary @c1)"
expect "PUT chunk again" 200 "$(code PUT /chunks/$H1 -H "$AUTH" --data-binary @c1)"
[ -f "$ROOT/chunks/${H1:0:2}/$H1" ] && ok "stored as chunks/xx/<hash>" || fail "stored as chunks/xx/<hash>" "$(files)"
stored1=$(metric terarec_ckpt_chunks_stored_total)
[ "$((stored1 - stored0))" = 1 ] && ok "chunks_stored counts new chunks" || fail "chunks_stored" "$stored0 $stored1"
expect "HEAD chunk" 200 "$(code HEAD /chunks/$H1 -H "$AUTH" -I)"
grep -qi '^content-length: 10000' last.body && ok "HEAD gives Content-Length" || fail "HEAD Content-Length" "$(cat last.body)"
expect "GET chunk" 200 "$(code GET /chunks/$H1 -H "$AUTH")"
cmp -s last.body c1 && ok "GET returns the bytes" || fail "GET returns the bytes"
expect "GET range" 206 "$(code GET /chunks/$H1 -H "$AUTH" -H 'Range: bytes=100-199' -D hdr.txt)"
cmp -s last.body <(tail -c +101 c1 | head -c 100) && ok "range bytes" || fail "range bytes"
grep -qi '^content-range: bytes 100-199/10000' hdr.txt && ok "Content-Range" || fail "Content-Range" "$(cat hdr.txt)"
expect "GET open range" 206 "$(code GET /chunks/$H1 -H "$AUTH" -H 'Range: bytes=9990-')"
cmp -s last.body <(tail -c 10 c1) && ok "open range bytes" || fail "open range bytes"
expect "GET bad range" 416 "$(code GET /chunks/$H1 -H "$AUTH" -H 'Range: bytes=20000-20010')"
expect "GET reversed range" 416 "$(code GET /chunks/$H1 -H "$AUTH" -H 'Range: bytes=50-10')"
expect "GET missing chunk" 404 "$(code GET /chunks/0123456789abcdef0123456789abcdef -H "$AUTH")"
expect "bad hash in the path" 400 "$(code GET /chunks/XYZ -H "$AUTH")"
expect "DELETE a chunk" 405 "$(code DELETE /chunks/$H1 -H "$AUTH")"

# ---- authentication
snap
head -c 500 /dev/urandom >c2
expect "no token" 401 "$(code PUT /chunks/$H1 --data-binary @c2)"
expect "wrong token" 401 "$(code PUT /chunks/$H1 -H 'Authorization: Bearer sekrit-tokeX' --data-binary @c2)"
expect "token prefix" 401 "$(code GET /healthz -H 'Authorization: Bearer sekrit')"
expect "token, longer" 401 "$(code GET /healthz -H 'Authorization: Bearer sekrit-token2')"
expect "no Bearer" 401 "$(code GET /healthz -H 'Authorization: sekrit-token')"
expect "no token, manifest" 401 "$(code PUT /runs/r/manifests/1.json --data-binary '{}')"
expect "no token, gc" 401 "$(code POST '/gc?keep=1')"
nothing_new "unauthorized"
grep -q "refused PUT /chunks/$H1 from 127.0.0.1:[0-9]*: 401" main.err && ok "a refusal is logged (method, path, peer)" ||
    fail "refusal logged" "$(tail -3 main.err)"

# ---- paths
snap
expect "/chunks/../x" 400 "$(code PUT /chunks/../x -H "$AUTH" --data-binary @c2)"
expect "/runs/../../etc/LATEST" 400 "$(code PUT /runs/../../etc/LATEST -H "$AUTH" --data-binary 1)"
expect "%2e%2e" 400 "$(code PUT /runs/%2e%2e/LATEST -H "$AUTH" --data-binary 1)"
expect "%2f in a run" 400 "$(code GET /runs/a%2fb/LATEST -H "$AUTH")"
expect "a run with '/'" 404 "$(code PUT /runs/a/b/LATEST -H "$AUTH" --data-binary 1)"
expect "a hidden run" 400 "$(code PUT /runs/.x/LATEST -H "$AUTH" --data-binary 1)"
expect "//" 400 "$(code GET //runs -H "$AUTH")"
expect "bad step" 400 "$(code PUT /runs/r/manifests/x1.json -H "$AUTH" --data-binary '{}')"
expect "unknown path" 404 "$(code GET /etc/passwd -H "$AUTH")"
nothing_new "traversal"

# ---- size limit (--max_body 64K)
head -c 70000 /dev/urandom >big
snap
expect "oversized body" 413 "$(code PUT /chunks/$H1 -H "$AUTH" --data-binary @big)"
expect "oversized chunked body" 413 "$(code PUT /chunks/ffffffffffffffffffffffffffffffff -H "$AUTH" \
    -H 'Transfer-Encoding: chunked' --data-binary @big)"
expect "oversized manifest" 413 "$(code PUT /runs/r/manifests/1.json -H "$AUTH" --data-binary @big)"
nothing_new "oversized"

# ---- manifests, commit, LATEST
# manifest STEP HASH: a manifest of run r at STEP holding one 2500-float tensor in one chunk
manifest() {
    printf '{"format_version": 1, "kind": "manifest", "run": "r", "step": %s, "rank": -1, "world": 1, ' "$1"
    printf '"split": "columnwise", "created": "2026-11-24T00:00:00Z", "config": {}, "state": {"step": %s}, ' "$1"
    printf '"tensors": [{"name": "dense/0/bias", "dtype": "f32", "shape": [2500], "chunks": '
    printf '[{"rows": [0, 2500], "cols": [0, 1], "hash": "%s", "bytes": 10000}]}]}\n' "$2"
}
manifest 10 "$H1" >m10.json
manifest 20 0123456789abcdef0123456789abcdef >m20-missing.json
snap
expect "manifest with a missing chunk" 409 "$(code PUT /runs/r/manifests/20.json -H "$AUTH" --data-binary @m20-missing.json)"
expect "manifest of another step" 400 "$(code PUT /runs/r/manifests/11.json -H "$AUTH" --data-binary @m10.json)"
expect "not a manifest" 400 "$(code PUT /runs/r/manifests/10.json -H "$AUTH" --data-binary '{"x": 1}')"
expect "commit of a missing manifest" 409 "$(code PUT /runs/r/LATEST -H "$AUTH" --data-binary 10)"
nothing_new "refused manifests and commit"
expect "PUT manifest" 201 "$(code PUT /runs/r/manifests/10.json -H "$AUTH" --data-binary @m10.json)"
expect "GET manifest" 200 "$(code GET /runs/r/manifests/10.json -H "$AUTH")"
cmp -s last.body m10.json && ok "the manifest as stored" || fail "the manifest as stored"
expect "GET LATEST before a commit" 404 "$(code GET /runs/r/LATEST -H "$AUTH")"
expect "commit" 200 "$(code PUT /runs/r/LATEST -H "$AUTH" --data-binary 10)"
expect "GET LATEST" 200 "$(code GET /runs/r/LATEST -H "$AUTH")"
expect "LATEST holds the step" 10 "$(cat last.body)"
expect "commit, not a step" 400 "$(code PUT /runs/r/LATEST -H "$AUTH" --data-binary 'ten')"
head -c 10000 /dev/urandom >c3
H3=$(hash_of c3)
expect "PUT chunk 3" 201 "$(code PUT /chunks/$H3 -H "$AUTH" --data-binary @c3)"
manifest 20 "$H3" >m20.json
expect "PUT manifest 20" 201 "$(code PUT /runs/r/manifests/20.json -H "$AUTH" --data-binary @m20.json)"
# LATEST replaced while a reader polls: every read is a whole step
(for i in $(seq 200); do curl -s -H "$AUTH" "$URL/runs/r/LATEST"; done >reads.txt) &
rp=$!
for i in $(seq 20); do
    code PUT /runs/r/LATEST -H "$AUTH" --data-binary 20 >/dev/null
    code PUT /runs/r/LATEST -H "$AUTH" --data-binary 10 >/dev/null
done
wait $rp
bad=$(grep -cvxE '10|20' reads.txt)
[ "$bad" = 0 ] && [ "$(wc -l <reads.txt)" = 200 ] && ok "LATEST replaced atomically (200 reads, each 10 or 20)" ||
    fail "LATEST atomic" "$bad bad reads of $(wc -l <reads.txt)"
expect "commit 20" 200 "$(code PUT /runs/r/LATEST -H "$AUTH" --data-binary 20)"
[ -z "$(files | grep '\.tmp-')" ] && ok "no temporary files" || fail "no temporary files" "$(files | grep tmp)"

# ---- listings and gc
expect "GET /runs" 200 "$(code GET /runs -H "$AUTH")"
expect "runs listed" '{"runs": ["r"]}' "$(cat last.body)"
expect "GET steps" 200 "$(code GET /runs/r/manifests -H "$AUTH")"
expect "steps listed" '{"steps": [10, 20]}' "$(cat last.body)"
expect "gc without keep (keep all)" 200 "$(code POST /gc -H "$AUTH")"
grep -q '"manifests_removed": 0,' last.body && grep -q '"chunks_removed": 0,' last.body &&
    ok "gc by default keeps every committed manifest and, within its grace, every chunk" || fail "gc default" "$(cat last.body)"
expect "gc keep=-1" 400 "$(code POST '/gc?keep=-1' -H "$AUTH")"
expect "GET /gc" 405 "$(code GET '/gc?keep=1' -H "$AUTH")"
expect "POST /gc?keep=1&grace=0" 200 "$(code POST '/gc?keep=1&grace=0' -H "$AUTH")"
grep -q '"manifests_removed": 1,' last.body && grep -q '"chunks_removed": 1,' last.body && ok "gc removed step 10 and its chunk" ||
    fail "gc stats" "$(cat last.body)"
expect "step 10 gone" 404 "$(code GET /runs/r/manifests/10.json -H "$AUTH")"
expect "chunk of 10 gone" 404 "$(code HEAD /chunks/$H1 -H "$AUTH" -I)"
expect "chunk of 20 kept" 200 "$(code HEAD /chunks/$H3 -H "$AUTH" -I)"

kill -TERM "$PID"
wait "$PID"
expect "SIGTERM: exit 0" 0 "$?"

# ---- --listen honoured
for i in 1 2 3 4 5; do
    P=$((20000 + RANDOM % 20000))
    start_server fixed --listen "127.0.0.1:$P" && break
    kill -9 "$PID" 2>/dev/null
done
expect "--listen 127.0.0.1:PORT" "http://127.0.0.1:$P" "$URL"
expect "served there" 200 "$(code GET /healthz -H "$AUTH")"
kill -INT "$PID"
wait "$PID"
expect "SIGINT: exit 0" 0 "$?"

# ---- bad flags
badflag() { # NAME FLAGS...
    local name=$1
    shift
    # TR_ROOT (set by tests/run.sh) would be taken as --root: unset here
    env -u TR_ROOT timeout 10 "$S" "$@" >bad.out 2>bad.err
    local rc=$?
    [ $rc -eq 2 ] && [ "$(grep -c 'error' bad.err)" = 1 ] && ok "bad flags ($name): exit 2, one error line" ||
        fail "bad flags ($name)" "exit $rc: $(cat bad.err)"
}
badflag "no root" --token_file tok
badflag "no token file" --root "$ROOT"
badflag "unknown flag" --root "$ROOT" --token_file tok --bogus 1
badflag "bad listen" --root "$ROOT" --token_file tok --listen nowhere
badflag "threads 0" --root "$ROOT" --token_file tok --threads 0
badflag "max_body" --root "$ROOT" --token_file tok --max_body 12Q
: >empty.tok
badflag "empty token file" --root "$ROOT" --token_file empty.tok
grep -q 'hint:' bad.err || env -u TR_ROOT timeout 10 "$S" --root "$ROOT" --token_file tok --bogus 1 2>&1 | grep -q 'hint:' &&
    ok "bad flags give a hint" || fail "bad flags give a hint" "$(cat bad.err)"

# ---- kill -9 during a commit
TR_CKPT_FAULT_COMMIT_DELAY_MS=20000 start_server fault || fail "fault server starts" "$(cat fault.err)"
manifest 30 "$H3" >m30.json
expect "PUT manifest 30" 201 "$(code PUT /runs/r/manifests/30.json -H "$AUTH" --data-binary @m30.json)"
code PUT /runs/r/LATEST -H "$AUTH" --data-binary 30 --max-time 30 >commit.code &
cp=$!
for i in $(seq 100); do ls "$ROOT"/runs/r/LATEST.tmp-* >/dev/null 2>&1 && break; sleep 0.1; done
if ls "$ROOT"/runs/r/LATEST.tmp-* >/dev/null 2>&1; then ok "the commit's temporary file is written"; else
    fail "the commit's temporary file is written" "$(files)"; fi
kill -9 "$PID"
wait "$PID" 2>/dev/null
wait $cp
expect "LATEST still names step 20" 20 "$(cat "$ROOT/runs/r/LATEST")"
start_server restart || fail "restarted server starts" "$(cat restart.err)"
expect "restarted: GET LATEST" 200 "$(code GET /runs/r/LATEST -H "$AUTH")"
expect "restarted: serves step 20" 20 "$(cat last.body)"
expect "restarted: its manifest" 200 "$(code GET /runs/r/manifests/20.json -H "$AUTH")"
cmp -s last.body m20.json && ok "restarted: the manifest of step 20" || fail "restarted: manifest of 20"
expect "gc after the crash" 200 "$(code POST '/gc?keep=2&grace=0' -H "$AUTH")"
grep -q '"temps_removed": 1' last.body && ok "gc removed the stray temporary file" || fail "gc temps" "$(cat last.body)"
[ -z "$(files | grep '\.tmp-')" ] && ok "no temporary file left" || fail "no temporary file left" "$(files)"
kill -TERM "$PID"
wait "$PID"
expect "restarted: SIGTERM exit 0" 0 "$?"
done_testing
