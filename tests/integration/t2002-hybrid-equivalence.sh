#!/usr/bin/env bash
# t2002: hybrid-parallel training on N = 2, 3, 4 and 8 workers (mpirun
# --oversubscribe) trains the same model as one worker: the loss of every one of
# 20 steps agrees with N = 1 within a relative 1e-5 and every final weight tensor
# within 1e-4 (see WTOL below for why not 1e-5), in
# column-wise mode (dims that do and do not divide by N, more workers than
# columns) and table-wise mode (data-parallel and model-parallel bottom MLP,
# including rank 0 holding only the bottom MLP for N > 4). The same N twice gives
# bitwise-identical weights. 32 workers with dim 512 column-wise pass too.
# --optimizer rowwise_adagrad (column-wise with uneven slices and ranks without
# columns, table-wise) and adagrad compare their optimizer state as well. The
# DCNv2 interaction passes the same comparisons in both split modes.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
# Weights: measured differences are 2e-8 to 8e-8 relative, except when a ReLU
# input lies within float rounding of zero and flips sign between the two runs
# (the per-rank partial sums of the gradients are added in another order than one
# process adds them). That was observed with dim 6 on N = 3 and N = 8: at step 7
# the losses jump from 1e-9 to 4e-6 apart and the dense weights end 1.3e-5 apart
# (2.5e-5 for one layer). Such a flip is a discrete event, not drift, so the
# honest bound for weights is 1e-4; losses stay within 1e-5 throughout.
WTOL=1e-4
CMP="python3 $TR_ROOT/tests/integration/compare_runs.py --wtol $WTOL"
if ! command -v mpirun >/dev/null 2>&1; then
    skip "hybrid equivalence" "mpirun not found (install openmpi-bin: make deps)"
    done_testing
fi
use_mpi
# 10 tables of mixed sizes (so table-wise placement is not trivial), an uneven batch
CARDS=30,7,50,7,1000,3,200,90,5,64
base() { # dim
    echo "--batch_size 250 --synthetic_dataset_cardinalities $CARDS --embedding_dim $1 --bottom_mlp_dims 16,$1
          --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --max_steps 20 --print_freq 1
          --synthetic_dataset_valid_batches 2 --synthetic_dataset_train_batches 50"
}
# run NAME N DIM EXTRA...: trains into $TMP/NAME (log.json + rank*.bin)
run() {
    local name=$1 n=$2 dim=$3; shift 3
    mkdir -p "$TMP/$name"
    local out
    if [ "$n" -eq 1 ]; then
        out=$($W $(base "$dim") "$@" --log_path "$TMP/$name/log.json" --dump_weights "$TMP/$name" 2>&1)
    else
        out=$(timeout 300 mpirun -np "$n" $W $(base "$dim") "$@" --log_path "$TMP/$name/log.json" \
              --dump_weights "$TMP/$name" 2>&1)
    fi || { echo "$out" | tail -n 20 | sed 's/^/# /'; return 1; }
}
equiv() { # NAME REF N DIM EXTRA...: runs and compares with REF
    local name=$1 ref=$2 n=$3 dim=$4; shift 4
    local out
    if run "$name" "$n" "$dim" "$@" && out=$($CMP "$TMP/$ref" "$TMP/$name" $CMP_EXTRA 2>&1); then
        ok "$name: N=$n equals N=1 ($(echo "$out" | tail -n 1))"
    else
        fail "$name: N=$n equals N=1" "$(echo "${out:-run failed}" | grep -v '^ok' | tail -n 8)"
    fi
}

run ref8 1 8 && ok "reference run, dim 8" || fail "reference run, dim 8"
run ref6 1 6 && ok "reference run, dim 6" || fail "reference run, dim 6"
NS="2 3 4 8" NS6="3 4 8" NSMP="2 3 8"
CMP_EXTRA=""
for n in $NS; do
    equiv "col8-n$n" ref8 "$n" 8 --columnwise_split --data_parallel_bottom_mlp
done
for n in $NS6; do # 6 columns: 4 does not divide them, 8 leaves two workers without a column
    equiv "col6-n$n" ref6 "$n" 6 --columnwise_split --data_parallel_bottom_mlp
done
for n in $NS; do
    equiv "tab-dp-n$n" ref8 "$n" 8 --data_parallel_bottom_mlp
done
# model-parallel bottom MLP (rank 0 runs it for the whole batch): the other ranks'
# bottom copies are unused, so only the top MLP (after 16*16+16 + 16*8+8 bottom
# parameters) must be identical on every rank
CMP_EXTRA="--mp-top0=408"
for n in $NSMP; do
    equiv "tab-mp-n$n" ref8 "$n" 8
done
CMP_EXTRA=""

# row-wise Adagrad (one accumulator per embedding row, element-wise Adagrad on the
# MLPs): column-wise, every rank holds a slice of each row, so the per-row sums
# of squares are all-reduced; the dumps hold the optimizer state too, and every
# rank's replica of a table's row-wise state must be identical. Dim 6 on 4 and 8
# workers: uneven slices, and two ranks without columns that still take part.
RW="--optimizer rowwise_adagrad --learning_rate 0.05"
run rw6 1 6 $RW && ok "reference run, rowwise_adagrad dim 6" || fail "reference run, rowwise_adagrad dim 6"
for n in 2 4 8; do
    equiv "rw-col6-n$n" rw6 "$n" 6 $RW --columnwise_split --data_parallel_bottom_mlp
done
for n in 3 4; do
    equiv "rw-tab-dp-n$n" rw6 "$n" 6 $RW --data_parallel_bottom_mlp
done
# the optimizer state is compared: element-wise Adagrad's per-element state too
run ag6 1 6 --optimizer adagrad --learning_rate 0.05 && equiv "ag-col6-n4" ag6 4 6 --optimizer adagrad \
    --learning_rate 0.05 --columnwise_split --data_parallel_bottom_mlp || fail "adagrad reference run, dim 6"
# and a row-wise run is not an element-wise one: their states do not compare
if python3 "$TR_ROOT/tests/integration/compare_runs.py" "$TMP/ag6" "$TMP/rw6" >/dev/null 2>&1; then
    fail "rowwise_adagrad and adagrad runs are told apart"
else
    ok "rowwise_adagrad and adagrad runs are told apart"
fi
# DCNv2 interaction (2 low-rank cross layers, rank 4; data-parallel like the top
# MLP): column-wise with a dim that divides by N and one that does not, table-wise
# with data-parallel and model-parallel bottom MLP (the cross layers start after
# the same 408 bottom parameters)
DCN="--interaction dcnv2 --dcn_num_layers 2 --dcn_low_rank_dim 4"
run dcnref8 1 8 $DCN && ok "reference run, dcnv2, dim 8" || fail "reference run, dcnv2, dim 8"
run dcnref6 1 6 $DCN && ok "reference run, dcnv2, dim 6" || fail "reference run, dcnv2, dim 6"
equiv "dcn-col8-n2" dcnref8 2 8 $DCN --columnwise_split --data_parallel_bottom_mlp
equiv "dcn-col6-n4" dcnref6 4 6 $DCN --columnwise_split --data_parallel_bottom_mlp
equiv "dcn-tab-dp-n3" dcnref8 3 8 $DCN --data_parallel_bottom_mlp
CMP_EXTRA="--mp-top0=408"
equiv "dcn-tab-mp-n3" dcnref8 3 8 $DCN
CMP_EXTRA=""
# and the dcnv2 runs are not the dot model's
if ! $CMP "$TMP/ref8" "$TMP/dcnref8" >/dev/null 2>&1; then
    ok "the dcnv2 model differs from the dot model"
else
    fail "the dcnv2 model differs from the dot model"
fi

# negative control: a model trained with a learning rate 1e-4 higher is told apart
if run "col8-n2-lr" 2 8 --columnwise_split --data_parallel_bottom_mlp --learning_rate 0.50005 &&
    ! $CMP "$TMP/ref8" "$TMP/col8-n2-lr" >/dev/null 2>&1; then
    ok "a different model (lr 0.50005 instead of 0.5) fails the comparison"
else
    fail "a different model (lr 0.50005 instead of 0.5) fails the comparison"
fi

# determinism: the same N twice is bitwise identical
out=""
if run "col8-n3-again" 3 8 --columnwise_split --data_parallel_bottom_mlp &&
    out=$(python3 "$TR_ROOT/tests/integration/compare_runs.py" "$TMP/col8-n3" "$TMP/col8-n3-again" --bitwise 2>&1); then
    ok "same N=3 twice: bitwise-identical losses and weights"
else
    fail "same N=3 twice: bitwise-identical losses and weights" "$(echo "$out" | grep -v '^ok' | tail -n 5)"
fi

# scale by simulation: 32 workers, dim 512 column-wise (16 columns each), small tables
big() {
    echo "--batch_size 256 --synthetic_dataset_cardinalities 100,40,300,7 --embedding_dim 512
          --bottom_mlp_dims 32,512 --top_mlp_dims 32,1 --learning_rate 0.1 --warmup_steps 0 --max_steps 20
          --print_freq 1 --synthetic_dataset_valid_batches 1 --synthetic_dataset_train_batches 20"
}
mkdir -p "$TMP/big1" "$TMP/big32"
if $W $(big) --log_path "$TMP/big1/log.json" --dump_weights "$TMP/big1" >/dev/null 2>&1 &&
    timeout 600 mpirun -np 32 $W $(big) --columnwise_split --data_parallel_bottom_mlp \
        --log_path "$TMP/big32/log.json" --dump_weights "$TMP/big32" >"$TMP/big32.out" 2>&1 &&
    out=$($CMP "$TMP/big1" "$TMP/big32" 2>&1); then
    ok "32 workers, dim 512 column-wise: equals N=1 ($(echo "$out" | tail -n 1))"
else
    fail "32 workers, dim 512 column-wise" "$( (tail -n 5 "$TMP/big32.out"; echo "${out:-}") | grep -v '^ok' | tail -n 8)"
fi
done_testing
