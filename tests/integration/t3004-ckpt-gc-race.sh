#!/usr/bin/env bash
# t3004: `terarec ckpt gc` racing live saves (issue 32). A store holds a run
# whose manifest names 40000 chunks, so that every gc walk takes about a second;
# a worker saves every step (--checkpoint_every 1) through terarec-ckpt while a
# loop runs gc on the server and another on the directory itself (both take the
# store's lock). Every save commits whole (the worker exits 0) and every step
# committed afterwards verifies: no chunk a manifest names was removed, before,
# during or after a walk.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
T=$TR_BIN/terarec
S=$TR_BIN/terarec-ckpt
PY=/usr/bin/python3
for b in "$W" "$T" "$S"; do
    [ -x "$b" ] || { fail "$b is built"; done_testing; }
done
printf 'tok-%s\n' "$RANDOM$RANDOM" >"$TMP/token"
SPID="" GPIDS=()
trap 'for p in $SPID "${GPIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT
ROOT=$TMP/store
NFILL=${T3004_CHUNKS:-40000}

# the filler run: one committed manifest naming NFILL chunks of 4 bytes
$PY - "$ROOT" "$NFILL" <<'PYEOF'
import json, os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(32)
chunks = []
for i in range(n):
    h = "%032x" % rnd.getrandbits(128)
    d = os.path.join(root, "chunks", h[:2])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, h), "wb") as f:
        f.write(b"\0\0\0\0")
    chunks.append({"rows": [i, i + 1], "cols": [0, 1], "hash": h, "bytes": 4})
m = {"format_version": 1, "kind": "manifest", "run": "filler", "step": 1, "rank": -1, "world": 1,
     "split": "columnwise", "created": "2026-11-27T00:00:00Z", "config": {}, "state": {},
     "tensors": [{"name": "emb/0", "dtype": "f32", "shape": [n, 1], "chunks": chunks}]}
os.makedirs(os.path.join(root, "runs", "filler", "manifests"), exist_ok=True)
json.dump(m, open(os.path.join(root, "runs", "filler", "manifests", "1.json"), "w"))
open(os.path.join(root, "runs", "filler", "LATEST"), "w").write("1\n")
PYEOF
[ -f "$ROOT/runs/filler/LATEST" ] && ok "a store with $NFILL chunks" || { fail "fill the store"; done_testing; }

start_store "$ROOT" || { fail "server starts" "$(tail -n 3 "$TMP/srv.err")"; done_testing; }

t0=$(date +%s.%N)
$T ckpt gc --checkpoint_dir "$URL" --checkpoint_token_file "$TMP/token" --grace 10 >"$TMP/gc0.out" 2>&1
t1=$(date +%s.%N)
GC_S=$($PY -c "print(round($t1 - $t0, 2))")
grep -q 'chunks kept '"$NFILL"', removed 0' "$TMP/gc0.out" && ok "one gc walk keeps the filler's chunks (${GC_S} s)" ||
    fail "first gc" "$(cat "$TMP/gc0.out")"

# gc loops: over HTTP, and on the directory (the CLI's own walk, the same lock)
gc_loop() {
    local n=0
    while [ ! -e "$TMP/stop" ]; do
        if ! $T ckpt gc "$@" --grace 10 >>"$TMP/gc.$BASHPID.out" 2>&1; then
            echo "gc failed" >>"$TMP/gc.failed"
        fi
        n=$((n + 1))
        echo "$n" >"$TMP/gc.$BASHPID.count"
    done
}
gc_loop --checkpoint_dir "$URL" --checkpoint_token_file "$TMP/token" &
GPIDS+=($!)
gc_loop --checkpoint_dir "$ROOT" &
GPIDS+=($!)

CARDS=30,7,50,7,20000,3,200,90,5,64
timeout 600 $W --batch_size 250 --synthetic_dataset_cardinalities $CARDS --embedding_dim 8 --bottom_mlp_dims 16,8 \
    --top_mlp_dims 16,1 --learning_rate 0.5 --synthetic_dataset_valid_batches 2 --synthetic_dataset_train_batches 7 \
    --optimizer adagrad --threads 1 --checkpoint_chunk_bytes 4096 --max_steps 25 --checkpoint_every 1 \
    --keep_checkpoints 0 --checkpoint_dir "$URL" --checkpoint_token_file "$TMP/token" --run_name race \
    >"$TMP/worker.out" 2>&1
WRC=$?
touch "$TMP/stop"
for p in "${GPIDS[@]}"; do wait "$p"; done
GPIDS=()
NGC=$(cat "$TMP"/gc.*.count 2>/dev/null | awk '{s += $1} END {print s + 0}')
[ "$WRC" -eq 0 ] && ok "every save committed while $NGC gc walks ran (worker exit 0)" ||
    fail "worker saving every step under gc" "exit $WRC: $(grep -E 'error|failed' "$TMP/worker.out" | head -n 5)"
[ ! -e "$TMP/gc.failed" ] && ok "every gc succeeded" || fail "gc failed" "$(grep -h -i error "$TMP"/gc.*.out | head -n 3)"
[ "${NGC:-0}" -ge 4 ] && ok "gc ran during the saves ($NGC walks)" || fail "gc ran during the saves" "${NGC:-0} walks"

# every committed manifest of the run verifies: its chunks are all there
STEPS=$(ls "$ROOT/runs/race/manifests" 2>/dev/null | sed -n 's/^\([0-9]*\)\.json$/\1/p' | sort -n)
LATEST=$(cat "$ROOT/runs/race/LATEST" 2>/dev/null)
nbad=0 nstep=0 bad=""
for s in $STEPS; do
    [ "$s" -le "${LATEST:--1}" ] || continue
    nstep=$((nstep + 1))
    if ! out=$($T ckpt verify --checkpoint_dir "$URL" --checkpoint_token_file "$TMP/token" --run_name race \
        --step "$s" 2>&1); then
        nbad=$((nbad + 1))
        bad="$bad step $s: $(echo "$out" | tail -n 1);"
    fi
done
[ "$LATEST" = 25 ] && ok "LATEST is the last step (25)" || fail "LATEST" "'$LATEST'"
[ "$nstep" -ge 25 ] && [ "$nbad" -eq 0 ] && ok "all $nstep committed steps verify" ||
    fail "committed steps verify" "$nbad of $nstep bad:$bad"
# and the last one restores
if out=$(timeout 300 $W --batch_size 250 --synthetic_dataset_cardinalities $CARDS --embedding_dim 8 \
    --bottom_mlp_dims 16,8 --top_mlp_dims 16,1 --learning_rate 0.5 --synthetic_dataset_valid_batches 2 \
    --synthetic_dataset_train_batches 7 --optimizer adagrad --threads 1 --mode eval \
    --restore "$URL#race@25" --checkpoint_token_file "$TMP/token" 2>&1); then
    ok "step 25 restores"
else
    fail "step 25 restores" "$(echo "$out" | tail -n 3)"
fi
kill -TERM "$SPID"
wait "$SPID"
SPID=""
done_testing
