#!/usr/bin/env bash
# t2008: multi-hot features train the same model on N = 2, 3 and 4 workers as on
# one (t2002's comparison: every step's loss within 1e-5, every weight tensor
# within 1e-4, the optimizer state too), in column-wise mode (a dim that divides
# by N and one that does not) and table-wise mode (data-parallel and
# model-parallel bottom MLP), with row-wise Adagrad on column slices (the per-row
# sums of squares of bags all-reduced), and through terarec-loader's ring (the
# bags travel the shared memory and rank 0's broadcast). The tables mix one-hot,
# fixed and variable hotness (empty bags included), summed and averaged. The
# same N twice is bitwise identical; a run that sums the bags it should average
# fails the comparison.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
L=$TR_BIN/terarec-loader
WTOL=1e-4
CMP="python3 $TR_ROOT/tests/integration/compare_runs.py --wtol $WTOL"
if ! command -v mpirun >/dev/null 2>&1; then
    skip "multi-hot equivalence" "mpirun not found (install openmpi-bin: make deps)"
    done_testing
fi
use_mpi
R=t2008-$$
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -f /dev/shm/terarec-$R*' EXIT
# 8 tables of mixed sizes and bags: hotness 1 is one-hot; --pooling per table
CARDS=30,7,50,7,1000,3,200,90
DATA="--batch_size 250 --synthetic_dataset_cardinalities $CARDS --synthetic_dataset_multi_hot_sizes 3,1,4,2,5,1,2,1
      --synthetic_dataset_multi_hot_lengths variable --synthetic_dataset_valid_batches 2
      --synthetic_dataset_train_batches 50"
base() { # dim
    echo "$DATA --embedding_dim $1 --bottom_mlp_dims 16,$1 --top_mlp_dims 16,1 --learning_rate 0.5
          --warmup_steps 0 --max_steps 12 --print_freq 1 --pooling sum,sum,mean,sum,mean,sum,sum,mean"
}
run() { # NAME N DIM EXTRA...
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
equiv() { # NAME REF N DIM EXTRA...
    local name=$1 ref=$2 n=$3 dim=$4; shift 4
    local out
    if run "$name" "$n" "$dim" "$@" && out=$($CMP "$TMP/$ref" "$TMP/$name" $CMP_EXTRA 2>&1); then
        ok "$name: N=$n equals N=1 ($(echo "$out" | tail -n 1))"
    else
        fail "$name: N=$n equals N=1" "$(echo "${out:-run failed}" | grep -v '^ok' | tail -n 8)"
    fi
}

run ref8 1 8 && ok "reference run, multi-hot, dim 8" || fail "reference run, multi-hot, dim 8"
run ref6 1 6 && ok "reference run, multi-hot, dim 6" || fail "reference run, multi-hot, dim 6"
CMP_EXTRA=""
equiv col8-n2 ref8 2 8 --columnwise_split --data_parallel_bottom_mlp
equiv col6-n4 ref6 4 6 --columnwise_split --data_parallel_bottom_mlp
equiv tab-dp-n3 ref8 3 8 --data_parallel_bottom_mlp
# model-parallel bottom MLP: only the top MLP (after 16*16+16 + 16*8+8 bottom
# parameters) is the same on every rank
CMP_EXTRA="--mp-top0=408"
equiv tab-mp-n2 ref8 2 8
CMP_EXTRA=""
# row-wise Adagrad, column-wise: each rank holds a slice of every row, the bags'
# per-row sums of squares are added over the ranks (3 ranks: uneven slices of 8);
# uniform ids, so that a table's bags name more distinct rows than the batch has
# samples (the sums of a table take as many entries as it has ids), and
# accumulators from 0, so that every row's sum decides its step (from 0.1 a lost
# sum moves the weights by less than the bound)
RW="--optimizer rowwise_adagrad --learning_rate 0.05 --synthetic_ids uniform --adagrad_initial_accumulator_value 0"
run rw8 1 8 $RW && ok "reference run, multi-hot rowwise_adagrad" || fail "reference run, multi-hot rowwise_adagrad"
equiv rw-col8-n3 rw8 3 8 $RW --columnwise_split --data_parallel_bottom_mlp
# DCNv2 (the MLPerf model's interaction), column-wise
DCN="--interaction dcnv2 --dcn_num_layers 2 --dcn_low_rank_dim 4"
run dcn8 1 8 $DCN && ok "reference run, multi-hot dcnv2" || fail "reference run, multi-hot dcnv2"
equiv dcn-col8-n2 dcn8 2 8 $DCN --columnwise_split --data_parallel_bottom_mlp

# the bags through terarec-loader's ring and rank 0's broadcast: bitwise the
# in-process reader's run (t1003's rule)
mkdir -p "$TMP/ring3"
timeout 300 $L --ring "$R" $DATA --attach_timeout 60 >"$TMP/ring3.l.out" 2>&1 &
lp=$!
out=""
if timeout 300 mpirun -np 3 $W $(base 8) --data_parallel_bottom_mlp --loader "shm:$R" \
    --log_path "$TMP/ring3/log.json" --dump_weights "$TMP/ring3" >"$TMP/ring3.out" 2>&1 && wait $lp &&
    out=$(python3 "$TR_ROOT/tests/integration/compare_runs.py" "$TMP/tab-dp-n3" "$TMP/ring3" --bitwise 2>&1); then
    ok "through terarec-loader's ring, N=3: bitwise the in-process reader's run"
else
    fail "through terarec-loader's ring, N=3" "$( (tail -n 4 "$TMP/ring3.out" "$TMP/ring3.l.out"; echo "$out") |
        grep -v '^ok' | tail -n 8)"
fi

# determinism and a negative control
if run col8-n2-again 2 8 --columnwise_split --data_parallel_bottom_mlp &&
    out=$(python3 "$TR_ROOT/tests/integration/compare_runs.py" "$TMP/col8-n2" "$TMP/col8-n2-again" --bitwise 2>&1); then
    ok "same N=2 twice: bitwise-identical losses and weights"
else
    fail "same N=2 twice: bitwise-identical losses and weights" "$(echo "$out" | grep -v '^ok' | tail -n 5)"
fi
if run col8-n2-sum 2 8 --columnwise_split --data_parallel_bottom_mlp --pooling sum &&
    ! $CMP "$TMP/ref8" "$TMP/col8-n2-sum" >/dev/null 2>&1; then
    ok "summing the bags the reference averages fails the comparison"
else
    fail "summing the bags the reference averages fails the comparison"
fi
done_testing
