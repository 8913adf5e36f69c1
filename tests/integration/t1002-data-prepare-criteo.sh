#!/usr/bin/env bash
# t1002: `terarec data prepare` on the real Criteo sample (kaggle_train_random_0p3pct.tsv,
# 101139 rows) from the shared data folder, which is never copied into the repository:
# 90% train (shuffled, the default) / 10% test by position, row counts, bytes equal to
# the Python reference on the first 20000 rows (both modes), 1 and 2 threads identical,
# and a small DLRM trained for 4 epochs reaching a test AUC above 0.72 (bench/real_auc.sh
# measures the model quality properly: validation-chosen epoch, seeds, PyTorch and
# logistic regression in the same run).
# SKIPs when the data folder is absent.
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
W=$TR_BIN/terarec-worker
PY=$(command -v python3)
REF="$PY $(cd "$(dirname "$0")" && pwd)/prepare_ref.py"
DATA=${TR_CRITEO_SAMPLE:-$TR_ROOT/../shared/data/criteo_sample}
SRC=$DATA/kaggle_train_random_0p3pct.tsv

if [ ! -r "$SRC" ]; then
    echo "# $SRC not found: the real-data checks are skipped"
    skip "prepare the real Criteo sample" "no data folder ($DATA)"
    done_testing
fi
cd "$TMP" || exit 1

out=$($T data prepare --output full --test_fraction 0.1 --threads 2 "$SRC" 2>&1); rc=$?
echo "$out" | grep -E '^(train|test|prepared)' | sed 's/^/# /'
if [ $rc -eq 0 ] && [ "$($REF rows full)" = "91025 10114" ] && echo "$out" | grep -q '^train: 91025 rows, ' \
    && echo "$out" | grep -q '^prepared 101139 rows '; then
    ok "101139 rows: 91025 train (shuffled) + 10114 test (the last 10% by position)"
else
    fail "101139 rows: 91025 train + 10114 test" "rc=$rc $out"
fi
$T data prepare --output full1 --test_fraction 0.1 --threads 1 "$SRC" >/dev/null 2>&1
d=$(same_dataset full full1) && ok "threshold mode: --threads 1 and 2 identical" || fail "threshold mode: threads" "$d"
$T data prepare --output h1 --max_ind_range 40000000 --test_fraction 0.1 --threads 1 "$SRC" >/dev/null 2>&1
$T data prepare --output h2 --max_ind_range 40000000 --test_fraction 0.1 --threads 2 --chunk_size 1M "$SRC" \
    >/dev/null 2>&1
d=$(same_dataset h1 h2) && ok "hash mode: --threads 1 and 2 identical" || fail "hash mode: threads" "$d"

head -n 20000 "$SRC" >head.tsv
for spec in "threshold 3 --frequency_threshold=3" "hash 1000000 --max_ind_range=1000000"; do
    set -- $spec
    rm -rf ref out
    want=$($REF write "$1" "$2" fraction 0.1 ref head.tsv)
    log=$($T data prepare --output out --no_shuffle --test_fraction 0.1 "$3" head.tsv 2>&1)
    d=$(same_dataset ref out) && echo "$log" | grep -q "cardinalities $want;" \
        && ok "$1 mode on 20000 real rows: bytes equal the reference" || fail "$1 mode on 20000 real rows" "$d $log"
done

out=$($W --dataset_type split_binary --dataset_path full --batch_size 512 --epochs 4 --embedding_dim 16 \
    --bottom_mlp_dims 64,16 --top_mlp_dims 64,1 --learning_rate 1.0 --warmup_steps 50 --decay_start_step 100000 \
    --print_freq 1000 --log_path "$TMP/real.json" 2>&1); rc=$?
echo "$out" | grep '^validation' | sed 's/^/# /'
auc=$(echo "$out" | sed -n 's/^summary: .*best_auc=\([0-9.]*\);.*/\1/p')
if [ $rc -eq 0 ] && [ "$(echo "$out" | grep -c '^validation: ')" -eq 4 ] && [ -n "$auc" ] &&
    $PY -c "import sys; sys.exit(0 if $auc > 0.72 else 1)"; then
    ok "4 epochs on the prepared sample: best test auc $auc > 0.72"
else
    fail "4 epochs on the prepared sample: test auc > 0.72" "rc=$rc auc=$auc $out"
fi
done_testing
