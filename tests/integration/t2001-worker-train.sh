#!/usr/bin/env bash
# t2001: terarec-worker trains on the learnable synthetic data: over 300 steps the
# loss falls and validation AUC passes 0.7 (SGD and Adagrad); the same run twice
# gives bitwise the same losses; 1 and 2 threads agree to float rounding; with
# --events_addr the launcher's listener gets hello, beats, step events and bye.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
PY=$(command -v python3)
SMALL="--batch_size 2048 --synthetic_dataset_cardinalities 26x100000 --embedding_dim 16 --bottom_mlp_dims 64,16
       --top_mlp_dims 64,1 --warmup_steps 20 --synthetic_dataset_valid_batches 10"

# summary LOG: prints "first_loss last_loss final_auc nrecords" from a DLLogger log
summary() {
    $PY - "$1" <<'PYEOF'
import json, sys
recs = [json.loads(l[5:]) for l in open(sys.argv[1]) if l.startswith("DLLL ")]
steps = [r for r in recs if isinstance(r["step"], int) and "loss" in r["data"]]
evals = [r for r in recs if isinstance(r["step"], int) and "auc" in r["data"]]
final = [r for r in recs if r["step"] == []]
assert recs[0]["step"] == "PARAMETER", "first record must be PARAMETER"
assert final and "throughput" in final[-1]["data"] and "mean_step_time_ms" in final[-1]["data"]
print(steps[0]["data"]["loss"], steps[-1]["data"]["loss"], evals[-1]["data"]["auc"], len(steps))
PYEOF
}

for opt in "sgd 1" "adagrad 0.05"; do
    set -- $opt
    log=$TMP/$1.json
    if out=$($W $SMALL --optimizer $1 --learning_rate $2 --max_steps 300 --print_freq 50 --log_path "$log" 2>&1); then
        read -r l0 l1 auc n <<<"$(summary "$log")"
        echo "# $1: loss $l0 -> $l1, auc $auc, $n records"
        $PY -c "import sys; sys.exit(0 if $l1 < $l0 - 0.05 else 1)" && ok "$1: loss falls over 300 steps" \
            || fail "$1: loss falls over 300 steps" "first $l0 last $l1"
        $PY -c "import sys; sys.exit(0 if $auc > 0.7 else 1)" && ok "$1: validation auc > 0.7" \
            || fail "$1: validation auc > 0.7" "auc $auc"
        echo "$out" | grep -qE '^validation: step=300, auc=' && ok "$1: console reports the evaluation" \
            || fail "$1: console reports the evaluation" "$out"
    else
        fail "$1: run" "$out"
    fi
done

# --auc_threshold stops at the first evaluation that reaches it (10 evaluations per epoch)
out=$($W $SMALL --learning_rate 1 --synthetic_dataset_train_batches 300 --evals_per_epoch 10 --auc_threshold 0.7 \
      --print_freq 1000 --log_path "$TMP/thr.json" 2>&1)
if echo "$out" | grep -qE '^auc 0\.[0-9]+ reached --auc_threshold 0\.700000 at step [0-9]+: stopping' &&
    steps=$(echo "$out" | sed -n 's/^summary: steps=\([0-9]*\),.*/\1/p') && [ "$steps" -lt 300 ]; then
    ok "--auc_threshold 0.7 stops early (after $steps of 300 steps)"
else
    fail "--auc_threshold 0.7 stops early" "$(echo "$out" | tail -n 5)"
fi

# determinism: the same run twice -> identical loss records (full precision in the JSON log)
for k in 1 2; do
    $W $SMALL --max_steps 40 --print_freq 5 --learning_rate 1 --log_path "$TMP/det$k.json" >/dev/null 2>&1
    $PY -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l[5:])
    if isinstance(r["step"], int): print(r["step"], json.dumps(r["data"].get("loss")), json.dumps(r["data"].get("auc")))' \
        "$TMP/det$k.json" >"$TMP/det$k.loss"
done
[ -s "$TMP/det1.loss" ] && cmp -s "$TMP/det1.loss" "$TMP/det2.loss" && ok "same run twice: bitwise equal losses" \
    || fail "same run twice: bitwise equal losses" "$(diff "$TMP/det1.loss" "$TMP/det2.loss" | head -5)"

# threads: 1 vs 2 agree to float rounding (relative 1e-4 after 40 steps)
$W $SMALL --max_steps 40 --print_freq 5 --learning_rate 1 --threads 1 --log_path "$TMP/t1.json" >/dev/null 2>&1
$W $SMALL --max_steps 40 --print_freq 5 --learning_rate 1 --threads 2 --log_path "$TMP/t2.json" >/dev/null 2>&1
if $PY - "$TMP/t1.json" "$TMP/t2.json" <<'PYEOF'
import json, sys
def losses(p):
    recs = [json.loads(l[5:]) for l in open(p) if l.startswith("DLLL ")]
    return [r["data"]["loss"] for r in recs if isinstance(r["step"], int) and "loss" in r["data"]]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print("# threads 1 vs 2: %d records, worst relative difference %.3g" % (len(a), worst))
sys.exit(0 if len(a) == len(b) == 8 and worst < 1e-4 else 1)
PYEOF
then ok "threads 1 vs 2 agree"; else fail "threads 1 vs 2 agree"; fi

# --events_addr: a listener standing in for `terarec train` collects the lines
echo tok-4001 >"$TMP/ev.tok"
$PY - "$TMP/ev.sock" "$TMP/ev.lines" <<'PYEOF' &
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1]); s.listen(1); s.settimeout(60)
c, _ = s.accept()
with open(sys.argv[2], "wb") as out:
    while True:
        b = c.recv(65536)
        if not b: break
        out.write(b)
PYEOF
lpid=$!
for _ in $(seq 50); do [ -S "$TMP/ev.sock" ] && break; sleep 0.1; done
out=$($W $SMALL --max_steps 200 --print_freq 50 --log_path "$TMP/ev.json" --events_addr "unix:$TMP/ev.sock" \
      --events_token_file "$TMP/ev.tok" 2>&1)
rc=$?
wait $lpid
if [ $rc -eq 0 ] && res=$($PY - "$TMP/ev.lines" <<'PYEOF'
import json, sys
m = [json.loads(l) for l in open(sys.argv[1])]
h = m[0]
assert h["type"] == "hello" and h["v"] == 1 and h["token"] == "tok-4001", h
assert (h["rank"], h["size"], h["local_rank"]) == (0, 1, 0) and h["pid"] > 0 and h["host"], h
assert m[-1] == {"type": "bye", "rank": 0, "exit": 0}, m[-1]
beats = [x for x in m if x["type"] == "beat"]
steps = [x for x in m if x["type"] == "event" and x["kind"] == "step"]
kinds = {x["kind"] for x in m if x["type"] == "event"}
assert {"params", "step", "eval", "summary"} <= kinds, kinds
assert [x["step"] for x in steps] == [50, 100, 150, 200], steps
assert all(x["data"]["samples_per_s"] > 0 and "loss" in x["data"] for x in steps), steps
span = m[-2]["time"] - steps[0]["time"] if len(m) > 2 else 0
assert beats or span < 1.2, "no beat in %.1f s" % span
assert all(0 <= b["step"] <= 200 for b in beats), beats
print("%d lines, %d beats" % (len(m), len(beats)))
PYEOF
); then
    ok "--events_addr: hello, beats, step events, bye ($res)"
else
    fail "--events_addr: hello, beats, step events, bye" \
        "rc $rc: $(tail -n 3 "$TMP/ev.lines" 2>&1; echo "$out" | tail -n 3)"
fi
out=$($W $SMALL --max_steps 1 --log_path '' --events_addr "udp:$TMP/ev.sock" --events_token_file "$TMP/ev.tok" 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "error: --events_addr 'udp:" && ok "a bad --events_addr is refused (exit 2)" \
    || fail "a bad --events_addr is refused (exit 2)" "rc $rc: $out"
out=$($W $SMALL --max_steps 1 --log_path '' --events_addr "unix:$TMP/ev.sock" --events_token_file "$TMP/none" 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "cannot read --events_token_file" &&
    ok "a missing token file is refused (exit 2)" || fail "a missing token file is refused (exit 2)" "rc $rc: $out"
done_testing
