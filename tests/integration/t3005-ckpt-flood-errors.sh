#!/usr/bin/env bash
# t3005: terarec-ckpt under a flood, and errors that name their cause (issue 32).
# 3000 connections from 127.0.0.2 each send half a request header and wait: an
# authenticated client on 127.0.0.1 is still answered within seconds (per-address
# and total connection limits), the half-sent headers are closed after
# --idle_timeout, and SIGTERM ends the server within 2 s. A worker given a wrong
# token stops before its first step with one line naming the store and 401 and a
# hint about --checkpoint_token_file. A store on a full disk (a 2 MiB tmpfs)
# answers 507 naming ENOSPC, and the worker prints it.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
T=$TR_BIN/terarec
S=$TR_BIN/terarec-ckpt
PY=/usr/bin/python3
for b in "$W" "$T" "$S"; do
    [ -x "$b" ] || { fail "$b is built"; done_testing; }
done
printf 'tok-%s\n' "$RANDOM$RANDOM" >"$TMP/token"
printf 'wrong-%s\n' "$RANDOM" >"$TMP/wrong"
SPID="" FPID="" MNT=""
cleanup() {
    for p in $SPID $FPID; do kill -9 "$p" 2>/dev/null; done
    [ -n "$MNT" ] && umount "$MNT" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
ulimit -n 16384 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null
FLOOD=1
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 4000 ]; then
    FLOOD=0 # 3000 sockets do not fit in this process's descriptors
fi

AUTH="Authorization: Bearer $(cat "$TMP/token")"
BASE="--batch_size 250 --synthetic_dataset_cardinalities 30,7,50,7,2000,3 --embedding_dim 8 --bottom_mlp_dims 16,8
      --top_mlp_dims 16,1 --learning_rate 0.5 --synthetic_dataset_valid_batches 2 --synthetic_dataset_train_batches 7
      --threads 1 --print_freq 1"

# ---- the flood
if [ "$FLOOD" = 1 ]; then
cat >"$TMP/flood.py" <<'PYEOF'
import socket, sys, time
port, n, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
socks = []
for i in range(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.2", 0))
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except (BlockingIOError, InterruptedError):
        pass
    except OSError:
        pass
    socks.append(s)
time.sleep(0.5)
sent = 0
for s in socks:
    try:
        s.send(b"PUT /chunks/00000000000000000000000000000000 HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")
        sent += 1
    except OSError:
        pass
print("flooding: %d sockets, %d sent half a header" % (n, sent), flush=True)
time.sleep(hold)
PYEOF
start_store "$TMP/store" --idle_timeout 3 || { fail "server starts" "$(tail -n 3 "$TMP/srv.err")"; done_testing; }
$PY "$TMP/flood.py" "$PORT" 3000 60 >"$TMP/flood.out" 2>&1 &
FPID=$!
for _ in $(seq 200); do
    grep -q flooding "$TMP/flood.out" && break
    sleep 0.1
done
grep -q flooding "$TMP/flood.out" && ok "3000 half-sent headers from 127.0.0.2 ($(cat "$TMP/flood.out"))" ||
    fail "the flood starts" "$(cat "$TMP/flood.out")"
t0=$(date +%s.%N)
code=$(curl -s -o "$TMP/h.body" -w '%{http_code}' --max-time 5 -H "$AUTH" "$URL/healthz")
t1=$(date +%s.%N)
[ "$code" = 200 ] && ok "an authenticated GET is answered during the flood ($($PY -c "print(round($t1 - $t0, 2))") s)" ||
    fail "authenticated GET during the flood" "code '$code'"
# a save: a worker's checkpoint (chunks, manifest, commit) within seconds
t0=$(date +%s.%N)
if out=$(timeout 60 $W $BASE --max_steps 2 --checkpoint_dir "$URL" --checkpoint_token_file "$TMP/token" \
    --run_name flood 2>&1) && [ "$(curl -s --max-time 5 -H "$AUTH" "$URL/runs/flood/LATEST")" = 2 ]; then
    t1=$(date +%s.%N)
    ok "a worker saves and commits during the flood ($($PY -c "print(round($t1 - $t0, 2))") s)"
else
    fail "a worker saves during the flood" "$(echo "$out" | grep -iE 'error|fail' | head -n 3)"
fi
# the half-sent headers are closed once idle for --idle_timeout (3 s)
sleep 4
if command -v ss >/dev/null 2>&1; then
    n_all=$(ss -tn "( dport = :$PORT )" 2>/dev/null | grep -c '127.0.0.2')
    n_open=$(ss -tn state established "( sport = :$PORT )" 2>/dev/null | grep -c '127.0.0.2')
    [ "$n_open" -eq 0 ] && ok "idle half-sent headers closed after --idle_timeout ($n_all client sockets left half-closed)" ||
        fail "idle connections closed" "$n_open connections from 127.0.0.2 still open"
else
    skip "idle half-sent headers closed after --idle_timeout" "no ss here"
fi
t0=$(date +%s.%N)
kill -TERM "$SPID"
for _ in $(seq 40); do
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.05
done
t1=$(date +%s.%N)
if ! kill -0 "$SPID" 2>/dev/null; then
    wait "$SPID"
    rc=$?
    [ "$rc" -eq 0 ] && ok "SIGTERM during the flood ends the server within 2 s ($($PY -c "print(round($t1 - $t0, 2))") s), exit 0" ||
        fail "SIGTERM exit status" "$rc"
else
    fail "SIGTERM during the flood ends the server within 2 s" "still running after 2 s"
    kill -9 "$SPID"
fi
SPID=""
kill -9 "$FPID" 2>/dev/null
wait "$FPID" 2>/dev/null
FPID=""

# the same flood, still connected when SIGTERM comes (connections the server
# has not closed yet: no idle time has passed)
start_store "$TMP/store" || { fail "server restarts" "$(tail -n 3 "$TMP/srv.err")"; done_testing; }
$PY "$TMP/flood.py" "$PORT" 3000 60 >"$TMP/flood.out" 2>&1 &
FPID=$!
for _ in $(seq 200); do
    grep -q flooding "$TMP/flood.out" && break
    sleep 0.1
done
t0=$(date +%s.%N)
kill -TERM "$SPID"
for _ in $(seq 40); do
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.05
done
t1=$(date +%s.%N)
if ! kill -0 "$SPID" 2>/dev/null; then
    ok "SIGTERM with 3000 connections open ends the server within 2 s ($($PY -c "print(round($t1 - $t0, 2))") s)"
else
    fail "SIGTERM with 3000 connections open" "still running after 2 s"
    kill -9 "$SPID"
fi
wait "$SPID" 2>/dev/null
SPID=""
kill -9 "$FPID" 2>/dev/null
wait "$FPID" 2>/dev/null
FPID=""

else
    skip "3000 half-sent headers" "ulimit -n is $(ulimit -n), below the 4000 descriptors the flood needs"
fi

# ---- a wrong token: refused before the first step
start_store "$TMP/store" || { fail "server restarts" "$(tail -n 3 "$TMP/srv.err")"; done_testing; }
out=$(timeout 60 $W $BASE --max_steps 3 --checkpoint_dir "$URL" --checkpoint_token_file "$TMP/wrong" \
    --run_name wrongtok 2>&1)
rc=$?
if [ "$rc" -eq 2 ] && echo "$out" | grep -q "checkpoint store $URL refused the token: 401" &&
    echo "$out" | grep -q 'hint:.*--checkpoint_token_file' && ! echo "$out" | grep -qiE 'step +1\b|loss'; then
    ok "a wrong token stops the worker before its first step (exit 2, 401 and a hint)"
else
    fail "a wrong token before the first step" "exit $rc: $(echo "$out" | tail -n 4)"
fi
kill -TERM "$SPID"
wait "$SPID"
SPID=""

# ---- a full disk: 507 with its cause
MNT=$TMP/small
mkdir -p "$MNT"
if mount -t tmpfs -o size=2m tmpfs "$MNT" 2>/dev/null; then
    start_store "$MNT/store" || { fail "server on the tmpfs starts" "$(tail -n 3 "$TMP/srv.err")"; done_testing; }
    out=$(timeout 120 $W $BASE --synthetic_dataset_cardinalities 30,7,50,7,40000,3 --embedding_dim 16 --bottom_mlp_dims 16,16 \
        --max_steps 1 --checkpoint_dir "$URL" --checkpoint_token_file "$TMP/token" --run_name full 2>&1)
    rc=$?
    if [ "$rc" -ne 0 ] && echo "$out" | grep -q ': 507 .*disk is full (ENOSPC'; then
        ok "a full disk reaches the worker as 507 ENOSPC (exit $rc)"
    else
        fail "a full disk" "exit $rc: $(echo "$out" | grep -iE 'error|507' | head -n 3)"
    fi
    grep -q '507' "$TMP/srv.err" && ok "the server logs the 507" || fail "server logs the 507" "$(tail -n 3 "$TMP/srv.err")"
    kill -TERM "$SPID"
    wait "$SPID"
    SPID=""
    umount "$MNT" && MNT=""
else
    skip "a full disk reaches the worker as 507 ENOSPC" "cannot mount a tmpfs here"
fi
done_testing
