#!/usr/bin/env bash
# t2010: embedding tables in a row cache over host memory or a file
# (--table_store host, file:DIR) train bitwise as in memory: every loss and every
# weight and optimizer state of 20 steps equal, with 1 worker (SGD, Adagrad,
# row-wise Adagrad) and 3 workers (column-wise and table-wise, the model-parallel
# bottom MLP among them). The caches are the least a step can run with (two
# batches of ids: 500 rows for tables of 1000 to 6400), so nearly every batch
# evicts rows, changed ones written back and read again; two epochs with an
# evaluation after each, so the batch read ahead is dropped and read again, and
# the test batches go through the cache too. Uniform ids, so that a worker holding
# every table evicts rows for every training batch after the first few (checked);
# one run with power-law ids. The store's directory is empty
# afterwards. A run 1e-4 apart in learning rate fails the same comparison.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
CMP="python3 $TR_ROOT/tests/integration/compare_runs.py --bitwise"
CARDS=30,7,50,7,1000,3,2000,90,5,6400
base() {
    echo "--batch_size 250 --synthetic_dataset_cardinalities $CARDS --embedding_dim 8 --bottom_mlp_dims 16,8
          --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --max_steps 20 --print_freq 5
          --synthetic_dataset_train_batches 10 --synthetic_dataset_valid_batches 2 --evals_per_epoch 1
          --synthetic_ids uniform"
}
mkdir -p "$TMP/store"
# run NAME N EXTRA...: trains into $TMP/NAME (log.json + rank*.bin)
run() {
    local name=$1 n=$2 out
    shift 2
    mkdir -p "$TMP/$name"
    if [ "$n" -eq 1 ]; then
        out=$($W $(base) "$@" --log_path "$TMP/$name/log.json" --dump_weights "$TMP/$name" 2>&1)
    else
        out=$(timeout 300 mpirun -np "$n" $W $(base) "$@" --log_path "$TMP/$name/log.json" \
              --dump_weights "$TMP/$name" 2>&1)
    fi || { echo "$out" | tail -n 20 | sed 's/^/# /'; return 1; }
}
# evictions NAME: "batches train_plans_evicting" of rank 0's table store (the summary record)
evictions() {
    python3 - "$TMP/$1/log.json" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("DLLL "):
        line = line[5:]
    try:
        r = json.loads(line)
    except ValueError:
        continue
    d = r.get("data")
    ts = d.get("table_store") if isinstance(d, dict) else None
    if isinstance(ts, dict):  # the summary's (the parameter record has the flag's text)
        print(ts["batches"], ts["train_plans_evicting"])
EOF
}
# same NAME REF N STORE EXTRA...: a tiered run of NAME against the in-memory REF, bitwise
same() {
    local name=$1 ref=$2 n=$3 store=$4 out ev least=1
    shift 4
    # one worker holding every table, uniform ids: all but the batches that fill the caches
    [ "$n" -eq 1 ] && [ "${*/powerlaw/}" = "$*" ] && least=18
    if ! run "$name" "$n" "$@" --table_store "$store" --embedding_cache 0.001; then
        fail "$name: trains with --table_store $store"
        return
    fi
    ev=$(evictions "$name")
    if out=$($CMP "$TMP/$ref" "$TMP/$name" ${CMP_EXTRA:-} 2>&1) && [ -n "$ev" ] && [ "${ev#* }" -ge "$least" ]; then
        ok "$name: N=$n --table_store $store is bitwise the in-memory run (${ev#* } training-batch plans of ${ev% *} batches evicted rows)"
    else
        fail "$name: N=$n --table_store $store is bitwise the in-memory run" \
            "$(echo "${out:-}" | grep -v '^ok' | tail -n 6); batches, plans evicting: ${ev:-none}"
    fi
}

RW="--optimizer rowwise_adagrad --learning_rate 0.05"
AG="--optimizer adagrad --learning_rate 0.05"
run m1-sgd 1 && run m1-ag 1 $AG && run m1-rw 1 $RW && ok "in-memory references, 1 worker" ||
    fail "in-memory references, 1 worker"
same t1-sgd-file m1-sgd 1 "file:$TMP/store"
same t1-ag-host m1-ag 1 host $AG
same t1-rw-file m1-rw 1 "file:$TMP/store" $RW
# power-law ids (most rows hit): the references' data with fewer evictions
run m1-pl 1 --synthetic_ids powerlaw && same t1-pl-host m1-pl 1 host --synthetic_ids powerlaw ||
    fail "in-memory reference, power-law ids"

# negative control: 1e-4 apart in learning rate is told apart
if run t1-lr 1 --learning_rate 0.50005 --table_store host --embedding_cache 0.001 &&
    ! $CMP "$TMP/m1-sgd" "$TMP/t1-lr" >/dev/null 2>&1; then
    ok "a different model (lr 0.50005) fails the bitwise comparison"
else
    fail "a different model (lr 0.50005) fails the bitwise comparison"
fi

if command -v mpirun >/dev/null 2>&1; then
    use_mpi
    COL="--columnwise_split --data_parallel_bottom_mlp"
    # column-wise: every worker holds a slice of every table, its own cache and store
    run m3-col-rw 3 $COL $RW && same t3-col-rw-file m3-col-rw 3 "file:$TMP/store" $COL $RW ||
        fail "3 workers column-wise, in memory"
    run m3-col-sgd 3 $COL && same t3-col-sgd-host m3-col-sgd 3 host $COL || fail "3 workers column-wise, in memory"
    # table-wise: whole tables on their owners; data-parallel and model-parallel bottom MLP
    run m3-tab-ag 3 --data_parallel_bottom_mlp $AG &&
        same t3-tab-ag-file m3-tab-ag 3 "file:$TMP/store" --data_parallel_bottom_mlp $AG ||
        fail "3 workers table-wise, in memory"
    # (the other ranks' bottom MLP copies are unused: the top MLP after its 408
    # parameters is what every rank shares)
    CMP_EXTRA="--mp-top0=408"
    run m3-tab-mp-rw 3 $RW && same t3-tab-mp-rw-host m3-tab-mp-rw 3 host $RW || fail "3 workers table-wise mp, in memory"
    CMP_EXTRA=""
else
    skip "3 workers" "mpirun not found (install openmpi-bin: make deps)"
fi

# nothing stays in the store's directory (each file is unlinked once open)
if [ -z "$(ls -A "$TMP/store")" ]; then
    ok "the store's directory is empty after the runs"
else
    fail "the store's directory is empty after the runs" "$(ls -A "$TMP/store" | head -3)"
fi
done_testing
