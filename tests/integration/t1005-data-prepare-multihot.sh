#!/usr/bin/env bash
# t1005: terarec data prepare --multi_hot_sizes materializes multi-hot Criteo as
# MLPerf's DLRM-DCNv2 reference does: checked byte for byte against a numpy
# reference written from the reference's rule (multihot_ref.py: RandomState(0),
# np.random.randint per table) in threshold and hash mode, shuffled or not, and
# with another seed; the reference with the wrong seed fails the check. The worker
# trains on the result; bad flags are refused (exit 2, the flag named) before
# anything is written.
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
W=$TR_BIN/terarec-worker
PY=$(command -v python3)
cd "$TMP" || exit 1
# numpy for the reference (Debian's python3-numpy: make deps)
NP=""
for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' 2>/dev/null; then NP=$p; break; fi
done
MLPERF=3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1
REF="$TR_ROOT/tests/integration/multihot_ref.py"
partial_batch_dataset # data.tsv, and ds/: one-hot, threshold mode, file order

# refmatch NAME ONEHOT MULTIHOT SIZES [SEED]
refmatch() {
    local out
    if [ -z "$NP" ]; then
        skip "$1: numpy reference" "no python3 with numpy (python3-numpy: make deps)"
    elif out=$($NP "$REF" "$2" "$3" "$4" ${5:-} 2>&1); then
        ok "$1: $out"
    else
        fail "$1: matches MLPerf's rule" "$out"
    fi
}

if $T data prepare --output mh --test_fraction 0.1 --no_shuffle --multi_hot_sizes $MLPERF data.tsv >mh.log 2>&1; then
    ok "prepare --multi_hot_sizes (MLPerf's sizes): $(grep -o 'multi-hot: [0-9]* bytes' mh.log)"
else
    fail "prepare --multi_hot_sizes" "$(tail -n 4 mh.log)"
fi
refmatch "threshold mode, file order" ds mh $MLPERF
# hash mode (1000 rows a table), shuffled: the one-hot twin shuffled the same way
if $T data prepare --output h1 --max_ind_range 1000 --test_fraction 0.2 --shuffle_seed 9 data.tsv >h1.log 2>&1 &&
    $T data prepare --output h3 --max_ind_range 1000 --test_fraction 0.2 --shuffle_seed 9 --multi_hot_sizes $MLPERF \
        data.tsv >h3.log 2>&1; then
    ok "hash mode, shuffled: prepared one-hot and multi-hot"
else
    fail "hash mode, shuffled" "$(tail -n 3 h1.log h3.log)"
fi
refmatch "hash mode, shuffled" h1 h3 $MLPERF
SIZES=4,1,2,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,3
if $T data prepare --output s7 --max_ind_range 1000 --test_fraction 0.2 --shuffle_seed 9 --multi_hot_sizes $SIZES \
    --multi_hot_seed 7 data.tsv >s7.log 2>&1; then
    refmatch "--multi_hot_seed 7" h1 s7 $SIZES 7
    if [ -n "$NP" ] && ! $NP "$REF" h1 s7 $SIZES 0 >/dev/null 2>&1; then
        ok "the reference with seed 0 tells a dataset of seed 7 apart"
    elif [ -n "$NP" ]; then
        fail "the reference with seed 0 tells a dataset of seed 7 apart"
    fi
else
    fail "--multi_hot_seed 7" "$(tail -n 3 s7.log)"
fi
# the worker reads it: fixed hotness from the spec (averaged bags: a sum of 100 rows of a tiny
# table diverges on this toy data)
if out=$(timeout 120 $W --dataset_path mh --batch_size 128 --embedding_dim 8 --bottom_mlp_dims 16,8 \
    --top_mlp_dims 16,1 --max_steps 6 --print_freq 3 --learning_rate 0.05 --warmup_steps 0 --pooling mean --log_path '' --interaction dcnv2 --dcn_num_layers 1 \
    --dcn_low_rank_dim 4 2>&1) && echo "$out" | grep -q 'step=6,'; then
    ok "the worker trains on the multi-hot dataset ($(echo "$out" | grep -o 'loss=[0-9.]*' | tail -n 1))"
else
    fail "the worker trains on the multi-hot dataset" "$(echo "$out" | tail -n 3)"
fi

# bad flags: exit 2, the flag named, nothing written
bad() { # NAME MESSAGE ARGS...
    local name=$1 msg=$2; shift 2
    local out rc
    out=$($T data prepare --output badout --test_fraction 0.1 "$@" data.tsv 2>&1)
    rc=$?
    if [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$msg" && [ ! -e badout ]; then
        ok "$name: exit 2, '$msg'"
    else
        fail "$name" "rc=$rc $(echo "$out" | tail -n 2)"
    fi
}
bad "three sizes" "--multi_hot_sizes: 3 sizes; Criteo has 26" --multi_hot_sizes 3,2,1
bad "a size of 0" "multi_hot_sizes" --multi_hot_sizes 0,2
bad "a seed without sizes" "--multi_hot_seed needs --multi_hot_sizes" --multi_hot_seed 3
bad "pareto" "multi_hot_distribution" --multi_hot_sizes $MLPERF --multi_hot_distribution pareto
bad "a lookup over --memory_limit" "the lookup of cat_20 (1000 rows x 99 ids)" --max_ind_range 1000 \
    --multi_hot_sizes $MLPERF --memory_limit 300K
done_testing
