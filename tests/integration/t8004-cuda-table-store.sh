#!/usr/bin/env bash
# t8004: the table store on the CUDA backend: caches in GPU memory, staging in
# page-locked host memory, rows moved by the backend's move_rows kernel on its
# stream. With a GPU, --table_store host and file:DIR with the least caches train
# bitwise as the CUDA backend in memory (1 worker; SGD and row-wise Adagrad), and
# the plan of such a run is within 5% of its GPU memory peak. Without one every
# case SKIPs (TR_TEST_GPU=1 makes that a failure); the CUDA code is compiled and
# linked by make check-cuda on every machine.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
CMP="python3 $TR_ROOT/tests/integration/compare_runs.py --bitwise"
devices=$($W --version --parsable 2>/dev/null | sed -n 's/^cuda_devices://p')
devices=${devices:-0}
gpu_skip() { # NAME
    if [ "${TR_TEST_GPU:-0}" = 1 ]; then
        fail "$1" "no CUDA device, and TR_TEST_GPU=1 requires one"
    else
        skip "$1" "no CUDA device"
    fi
}
if [ "$devices" -eq 0 ]; then
    gpu_skip "cuda: --table_store host and file: train bitwise as the cuda backend in memory"
    done_testing
fi
M="--backend cuda --batch_size 512 --synthetic_dataset_cardinalities 30,7,50,7,20000,3,2000,90,5,64000
   --embedding_dim 16 --bottom_mlp_dims 32,16 --top_mlp_dims 32,1 --learning_rate 0.5 --warmup_steps 0
   --max_steps 20 --print_freq 1 --synthetic_dataset_train_batches 10 --synthetic_dataset_valid_batches 2
   --synthetic_ids uniform"
mkdir -p "$TMP/store"
run() { # NAME EXTRA...
    local name=$1
    shift
    mkdir -p "$TMP/$name"
    $W $M "$@" --log_path "$TMP/$name/log.json" --dump_weights "$TMP/$name" >"$TMP/$name.out" 2>&1
}
for opt in sgd rowwise_adagrad; do
    X="--optimizer $opt"
    [ $opt = sgd ] || X="$X --learning_rate 0.05"
    if ! run "mem-$opt" $X; then
        fail "cuda $opt in memory" "$(tail -n 3 "$TMP/mem-$opt.out")"
        continue
    fi
    for store in host "file:$TMP/store"; do
        name="tier-$opt-${store%%:*}"
        if run "$name" $X --table_store "$store" --embedding_cache 0.001 &&
            out=$($CMP "$TMP/mem-$opt" "$TMP/$name" 2>&1); then
            ok "cuda $opt: --table_store $store is bitwise the cuda backend in memory"
        else
            fail "cuda $opt: --table_store $store" "$(echo "${out:-}" | grep -v '^ok' | tail -n 4) $(tail -n 3 "$TMP/$name.out")"
        fi
    done
done
# the GPU memory the plan counts for a tiered run against the backend's own peak
peak=$(sed -n 's/.*memory: rank 0 GPU peak \([0-9.]*\) MiB, plan \([0-9.]*\) MiB.*/\1 \2/p' "$TMP/tier-sgd-host.out")
if [ -n "$peak" ] && python3 -c "import sys; p, q = map(float, sys.argv[1:]); assert abs(p - q) <= 0.05 * q" $peak; then
    ok "cuda: the tiered run's GPU memory peak is within 5% of its plan ($peak MiB)"
else
    fail "cuda: the tiered run's GPU memory peak within 5% of its plan" "$(grep 'memory:' "$TMP/tier-sgd-host.out")"
fi
done_testing
