#!/usr/bin/env bash
# t3010: checkpoints of tables in a row cache over a file (--table_store
# file:DIR, a cache of two batches' ids): a run saved every 2 steps and resumed
# trains bitwise as one in memory (losses, weights, optimizer state); its
# incremental saves name the unchanged chunks of the save before and stage a
# window of the tiered tables, not the tables; a worker killed with kill -9 while
# its cache holds changed rows resumes from the last checkpoint with nothing lost
# (bitwise the uninterrupted in-memory run), and its files are gone with it;
# checkpoints restore across tiers and world sizes (3 workers in a file tier to 1
# in memory, 1 in memory to 3 table-wise in a host tier), bitwise.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
CMP="python3 $TR_ROOT/tests/integration/compare_runs.py"
mkdir -p "$TMP/tier"
# 7 batches an epoch, shuffled samples, Adagrad (its state comes back too)
base() {
    echo "--batch_size 250 --synthetic_dataset_cardinalities 30,7,50,7,20000,3,2000,90,5,64000 --embedding_dim 8
          --bottom_mlp_dims 16,8 --top_mlp_dims 16,1 --learning_rate 0.05 --warmup_steps 3 --print_freq 1
          --synthetic_dataset_valid_batches 2 --synthetic_dataset_train_batches 7 --shuffle_samples
          --synthetic_ids uniform --optimizer adagrad --threads 1 --checkpoint_chunk_bytes 4096"
}
TIER="--table_store file:$TMP/tier --embedding_cache 0.001"
wrk() { # N ARGS...: output in $OUT
    local n=$1
    shift
    if [ "$n" -eq 1 ]; then
        OUT=$(timeout 300 $W "$@" 2>&1)
    else
        OUT=$(timeout 300 mpirun -np "$n" $W "$@" 2>&1)
    fi
}

# ---- save every 2 steps to step 5, resume to 12: bitwise the in-memory run
d=$TMP/resume
mkdir -p "$d/ref" "$d/b"
if wrk 1 $(base) --max_steps 12 --log_path "$d/ref/log.json" --dump_weights "$d/ref" &&
    wrk 1 $(base) $TIER --max_steps 5 --log_path "$d/a.json" --checkpoint_dir "$TMP/store" --run_name res \
        --checkpoint_every 2 && A_OUT=$OUT &&
    wrk 1 $(base) $TIER --max_steps 12 --log_path "$d/b/log.json" --dump_weights "$d/b" --checkpoint_dir \
        "$TMP/store" --run_name res --resume --checkpoint_every 2 &&
    out=$($CMP "$d/ref" "$d/b" --bitwise --steps-after=5 2>&1) && echo "$OUT" | grep -q 'restored .*step 5'; then
    ok "saved every 2 steps in a file tier, resumed at 5: steps 6-12 bitwise the in-memory run"
else
    fail "file tier: bitwise resume" "$(echo "$OUT ${out:-}" | grep -v '^ok' | tail -n 6)"
fi
# the saves after the first are incremental: they name unchanged chunks of the one before
python3 - "$TMP/store/runs/res/manifests" <<'EOF' && ok "an incremental save of a tiered table names chunks of the save before" || fail "incremental saves of a tiered table reuse chunks"
import json, sys, os
d = sys.argv[1]
m = {int(f[:-5]): json.load(open(os.path.join(d, f))) for f in os.listdir(d) if f.endswith(".json")}
a, b = sorted(m)[-2:]  # the resumed run's last two (the 3 newest are kept); its first save was full
h = lambda k: {c["hash"] for t in m[k]["tensors"] if t["name"] == "emb/9" for c in t["chunks"]}
shared, total = len(h(b) & h(a)), len(h(b))
print("# step %d shares %d of table 9's %d chunks with step %d" % (b, shared, total, a))
assert 0 < shared < total
EOF
# the staging: the dense part and the small tables, and a 64 MiB window for the tiered ones
stage=$(echo "$A_OUT" | sed -n 's/.*checkpoint: \([0-9.]*\) MiB of staging memory.*/\1/p')
if [ -n "$stage" ] && python3 -c "import sys; assert 64 <= float(sys.argv[1]) < 66" "$stage"; then
    ok "a tiered table is not staged whole: $stage MiB of staging (a 64 MiB window and the rest)"
else
    fail "staging of a tiered run" "'$stage' $(echo "$A_OUT" | grep staging)"
fi

# ---- kill -9 with changed rows in the cache: resume from the last checkpoint
d=$TMP/kill
mkdir -p "$d/ref" "$d/b"
$W $(base) $TIER --max_steps 100000 --log_path "$d/k.json" --checkpoint_dir "$TMP/store" --run_name kill \
    --checkpoint_every 3 >"$d/k.out" 2>&1 &
wpid=$!
for _ in $(seq 600); do
    latest=$(cat "$TMP/store/runs/kill/LATEST" 2>/dev/null)
    [ -n "$latest" ] && [ "$latest" -ge 9 ] && break
    sleep 0.05
done
kill -9 $wpid
wait $wpid 2>/dev/null
latest=$(cat "$TMP/store/runs/kill/LATEST" 2>/dev/null)
steps=$(grep -c '^step=' "$d/k.out")
if [ -n "$latest" ] && [ "$steps" -gt "$latest" ]; then
    ok "killed at step $steps, after the checkpoint of step $latest: the cache held rows changed since"
else
    fail "killed after a checkpoint" "LATEST=$latest steps=$steps $(tail -n 3 "$d/k.out")"
fi
[ -z "$(ls -A "$TMP/tier")" ] && ok "the killed worker's table files are gone" || fail "the killed worker's files are gone"
end=$((latest + 4))
if wrk 1 $(base) --max_steps $end --log_path "$d/ref/log.json" --dump_weights "$d/ref" &&
    wrk 1 $(base) $TIER --max_steps $end --log_path "$d/b/log.json" --dump_weights "$d/b" --checkpoint_dir \
        "$TMP/store" --run_name kill --resume &&
    out=$($CMP "$d/ref" "$d/b" --bitwise --steps-after="$latest" 2>&1) &&
    echo "$OUT" | grep -q "restored .*step $latest"; then
    ok "resumed from step $latest after kill -9: steps to $end bitwise the uninterrupted in-memory run"
else
    fail "resume after kill -9" "$(echo "$OUT ${out:-}" | grep -v '^ok' | tail -n 6)"
fi

# ---- across tiers and world sizes
if command -v mpirun >/dev/null 2>&1; then
    use_mpi
    d=$TMP/reshard
    mkdir -p "$d/src3" "$d/m1" "$d/src1" "$d/h3"
    if wrk 3 $(base) $TIER --columnwise_split --data_parallel_bottom_mlp --max_steps 6 --log_path "$d/src3/log.json" \
        --dump_weights "$d/src3" --checkpoint_dir "$TMP/store" --run_name r3 &&
        wrk 1 $(base) --max_steps 6 --log_path "$d/m1/log.json" --dump_weights "$d/m1" --restore "$TMP/store#r3" &&
        out=$($CMP "$d/src3" "$d/m1" --bitwise --no-losses 2>&1); then
        ok "saved by 3 column-wise workers in a file tier, restored on 1 in memory: bitwise"
    else
        fail "3 in a file tier -> 1 in memory" "$(echo "$OUT ${out:-}" | grep -v '^ok' | tail -n 6)"
    fi
    if wrk 1 $(base) --max_steps 6 --log_path "$d/src1/log.json" --dump_weights "$d/src1" --checkpoint_dir \
        "$TMP/store" --run_name r1 &&
        wrk 3 $(base) --table_store host --embedding_cache 0.001 --data_parallel_bottom_mlp --max_steps 6 \
            --log_path "$d/h3/log.json" --dump_weights "$d/h3" --restore "$TMP/store#r1" &&
        out=$($CMP "$d/src1" "$d/h3" --bitwise --no-losses 2>&1); then
        ok "saved by 1 worker in memory, restored on 3 table-wise in a host tier: bitwise"
    else
        fail "1 in memory -> 3 in a host tier" "$(echo "$OUT ${out:-}" | grep -v '^ok' | tail -n 6)"
    fi
else
    skip "restores across world sizes" "mpirun not found"
fi
done_testing
