#!/usr/bin/env bash
# t0002: bad input to terarec-worker and `terarec plan` (issue 8): options that
# exclude each other, FeatureSpecs that list a file, feature or split twice, paths
# too long, unclear error messages (a directory as the spec, a truncated file, an
# integer or size out of range, a write error), and output paths checked at
# start-up. Each case asserts the exit status and the message, and that nothing
# was written.
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
W=$TR_BIN/terarec-worker
PY=$(command -v python3)
TINY="--batch_size 4 --embedding_dim 4 --bottom_mlp_dims 4 --top_mlp_dims 4,1 --max_steps 2"
SYN="--synthetic_dataset_cardinalities 3x10 --synthetic_dataset_valid_batches 1"

# expect NAME RC REGEX CMD...: CMD exits RC, prints exactly one error line, a line
# matches REGEX (grep -E), and starts no training ('step=' or 'model:' lines);
# $TMP/log.json (the --log_path of worker cases) is not written
expect() {
    local name=$1 want=$2 re=$3; shift 3
    local out rc nerr
    rm -f "$TMP/log.json"
    out=$("$@" 2>&1); rc=$?
    nerr=$(echo "$out" | grep -c ' error: ')
    if [ "$rc" -eq "$want" ] && [ "$nerr" -eq 1 ] && echo "$out" | grep -qE -- "$re" \
        && ! echo "$out" | grep -qE '^(step=|model:)' && [ ! -e "$TMP/log.json" ]; then
        ok "$name"
    else
        fail "$name" "rc=$rc (want $want) errors=$nerr: $(echo "$out" | cut -c1-400 | tail -n 6)"
    fi
}
WL="$W --log_path $TMP/log.json"

# ---- a small split-binary dataset (3 train, 2 test samples; 2 numerical, 2 tables) ----
make_dataset() { # DIR
    $PY - "$1" <<'PYEOF'
import os, struct, sys
d = sys.argv[1]
for split, n in (("train", 8), ("test", 4)):
    os.makedirs(os.path.join(d, split), exist_ok=True)
    open(os.path.join(d, split, "label.bin"), "wb").write(bytes(i % 2 for i in range(n)))
    open(os.path.join(d, split, "numerical.bin"), "wb").write(struct.pack("<%de" % (2 * n), *[0.5] * (2 * n)))
    open(os.path.join(d, split, "cat_0.bin"), "wb").write(bytes(i % 5 for i in range(n)))
    open(os.path.join(d, split, "cat_1.bin"), "wb").write(bytes(i % 7 for i in range(n)))
spec = """channel_spec:
  categorical: [cat_0, cat_1]
  label: [label]
  numerical: [num_0, num_1]
feature_spec:
  cat_0: {cardinality: 5, dtype: int8}
  cat_1: {cardinality: 7, dtype: int8}
  label: {dtype: bool}
  num_0: {dtype: float16}
  num_1: {dtype: float16}
metadata: {}
source_spec:
"""
for split in ("test", "train"):
    spec += """  %s:
  - {features: [num_0, num_1], files: [%s/numerical.bin], type: split_binary}
  - {features: [label], files: [%s/label.bin], type: split_binary}
  - {features: [cat_0], files: [%s/cat_0.bin], type: split_binary}
  - {features: [cat_1], files: [%s/cat_1.bin], type: split_binary}
""" % ((split,) * 5)
open(os.path.join(d, "feature_spec.yaml"), "w").write(spec)
PYEOF
}
D=$TMP/ds
make_dataset "$D"
SB="--dataset_type split_binary --dataset_path $D"
out=$($WL $SB $TINY --batch_size 4 2>&1) && [ -s "$TMP/log.json" ] && ok "the unedited dataset trains" \
    || fail "the unedited dataset trains" "$out"

# ---- class 1: options that exclude each other ---------------------------------------------
expect "plan: --preset with --cardinalities" 2 'error: --preset and --synthetic_dataset_cardinalities cannot be used together' \
    $T plan --preset criteo_tb_t0 --cardinalities 5,5
expect "plan: --dataset_path with --cardinalities" 2 'error: --dataset_path and --synthetic_dataset_cardinalities cannot be used together' \
    $T plan --dataset_path "$D" --cardinalities 5,5
expect "plan: --preset with --dataset_path" 2 'error: --preset and --dataset_path cannot be used together' \
    $T plan --preset criteo_tb_t0 --dataset_path "$D"
expect "plan: --dataset_path with --num_numerical_features" 2 \
    'error: --dataset_path and --synthetic_dataset_num_numerical_features cannot be used together' \
    $T plan --dataset_path "$D" --num_numerical_features 3
expect "plan: --dataset_type split_binary without a path" 2 'error: --dataset_type split_binary needs --dataset_path' \
    $T plan --dataset_type split_binary --cardinalities 5
out=$($T plan --dataset_path "$D" --embedding_dim 4 --bottom_mlp_dims 4 --top_mlp_dims 4,1 --batch_size 4 2>&1) \
    && echo "$out" | grep -q '^fits: yes' && ok "plan: --dataset_path alone plans" || fail "plan: --dataset_path alone plans" "$out"
expect "worker: cardinalities with --dataset_path" 2 \
    'error: --synthetic_dataset_cardinalities and --dataset_path cannot be used together' \
    $WL $SB $TINY --synthetic_dataset_cardinalities 5,5
expect "worker: --synthetic_ids with split_binary" 2 \
    'error: --synthetic_ids and --dataset_type split_binary cannot be used together' \
    $WL --dataset_type split_binary $TINY --synthetic_ids uniform
# --dataset_path alone is split_binary when it holds a dataset (t4006), else refused
mkdir -p "$TMP/nodata"
expect "worker: --dataset_path alone that holds no dataset" 2 \
    "error: --dataset_path $TMP/nodata: holds no dataset" $WL --dataset_path "$TMP/nodata" $TINY
out=$(TR_DATASET_TYPE=synthetic $WL --dataset_path "$D" $TINY 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q 'error: --dataset_path and TR_DATASET_TYPE synthetic cannot be used together' \
    && ok "worker: the environment's flag is named" || fail "worker: the environment's flag is named" "rc=$rc $out"
expect "worker: --adagrad_epsilon with sgd" 2 'error: --adagrad_epsilon and --optimizer sgd cannot be used together' \
    $WL $SYN $TINY --optimizer sgd --adagrad_epsilon 1e-5
expect "worker: --adagrad_epsilon with the default sgd" 2 \
    'error: --adagrad_epsilon is given but the optimizer is sgd \(the default of --optimizer\)' \
    $WL $SYN $TINY --adagrad_epsilon 1e-5
expect "worker: --max_steps with --epochs" 2 'error: --max_steps and --epochs cannot be used together' \
    $WL $SYN $TINY --epochs 2
out=$($WL $SYN $TINY --optimizer adagrad --adagrad_epsilon 1e-5 2>&1) && ok "worker: adagrad flags with adagrad train" \
    || fail "worker: adagrad flags with adagrad train" "$out"
out=$($WL $SYN $TINY --optimizer rowwise_adagrad --adagrad_epsilon 1e-5 --adagrad_initial_accumulator_value 0.2 2>&1) \
    && ok "worker: adagrad flags with rowwise_adagrad train" || fail "worker: adagrad flags with rowwise_adagrad train" "$out"
expect "worker: rowwise_adagrad with epsilon 0 and accumulator 0" 2 \
    'error: --adagrad_epsilon 0 with --adagrad_initial_accumulator_value 0 divides 0 by 0' \
    $WL $SYN $TINY --optimizer rowwise_adagrad --adagrad_epsilon 0 --adagrad_initial_accumulator_value 0
expect "worker: an unknown optimizer names the choices" 2 \
    "error: --optimizer: 'rowwise_adam' is not one of sgd\|adagrad\|rowwise_adagrad" $WL $SYN $TINY --optimizer rowwise_adam
# the order of the training data
expect "worker: --shuffle_samples with --shuffle_batches" 2 \
    'error: --shuffle_samples and --shuffle_batches cannot be used together' \
    $WL $SYN $TINY --shuffle_samples --shuffle_batches
expect "worker: --start_position that is no position" 2 \
    "error: --start_position: '2:-1' is neither EPOCH:BATCH nor a step number" $WL $SYN $TINY --start_position 2:-1
expect "worker: --start_position past an epoch's last batch" 2 \
    'error: --start_position 0:64008: an epoch has batches 0 to 64007, not 64008' $WL $SYN $TINY --start_position 0:64008
# the cross layers' flags mean nothing with the dot interaction; their bounds
expect "worker: --dcn_low_rank_dim with the default dot interaction" 2 \
    'error: --dcn_low_rank_dim is given but the interaction is dot \(the default of --interaction\)' \
    $WL $SYN $TINY --dcn_low_rank_dim 8
expect "worker: --dcn_num_layers with --interaction dot" 2 \
    'error: --dcn_num_layers and --interaction dot cannot be used together' \
    $WL $SYN $TINY --interaction dot --dcn_num_layers 2
expect "plan: --dcn_low_rank_dim with --interaction dot" 2 \
    'error: --dcn_low_rank_dim and --interaction dot cannot be used together' \
    $T plan --cardinalities 5 --interaction dot --dcn_low_rank_dim 64
expect "worker: --dcn_num_layers 0" 2 "error: --dcn_num_layers: '0' is outside \[1, 16\]" \
    $WL $SYN $TINY --interaction dcnv2 --dcn_num_layers 0
expect "worker: --dcn_num_layers 17" 2 "error: --dcn_num_layers: '17' is outside \[1, 16\]" \
    $WL $SYN $TINY --interaction dcnv2 --dcn_num_layers 17
expect "worker: --dcn_low_rank_dim 0" 2 "error: --dcn_low_rank_dim: '0' is outside \[1, 65536\]" \
    $WL $SYN $TINY --interaction dcnv2 --dcn_low_rank_dim 0
expect "worker: --interaction of an unknown kind" 2 "error: --interaction: 'dcnv3'" \
    $WL $SYN $TINY --interaction dcnv3
out=$($WL $SYN $TINY --interaction dcnv2 --dcn_num_layers 16 --dcn_low_rank_dim 1 2>&1) \
    && ok "worker: dcnv2 with 16 layers of rank 1 trains" || fail "worker: dcnv2 with 16 layers of rank 1 trains" "$out"
hint=$($WL $SYN $TINY --dcn_num_layers 2 2>&1 | grep -c 'hint: the cross layers.* --interaction dcnv2')
[ "$hint" -eq 1 ] && ok "worker: the --dcn_* refusal has a hint" || fail "worker: the --dcn_* refusal has a hint"

# ---- class 2: a FeatureSpec naming something twice --------------------------------------
# edit_spec FROM TO: a copy of the dataset whose spec has the first FROM replaced by TO
edit_spec() {
    rm -rf "$TMP/e" && cp -r "$D" "$TMP/e"
    $PY - "$TMP/e/feature_spec.yaml" "$1" "$2" <<'PYEOF'
import sys
p, a, b = sys.argv[1:]
s = open(p).read()
assert a in s, a
open(p, "w").write(s.replace(a, b, 1))
PYEOF
}
SE="--dataset_type split_binary --dataset_path $TMP/e"
edit_spec "files: [train/cat_1.bin]" "files: [train/cat_0.bin]"
expect "spec: one file for two features" 2 \
    "error: feature spec '.*/e/feature_spec.yaml': file 'train/cat_0.bin' is listed twice, in source_spec.train\[2\].files and source_spec.train\[3\].files" \
    $WL $SE $TINY
edit_spec "  num_1: {dtype: float16}" "  num_1: {dtype: float16}
  cat_0: {cardinality: 9, dtype: int8}"
expect "spec: a feature name twice" 2 "error: feature spec '.*': feature_spec lists feature 'cat_0' twice \(lines 6 and 11\)" \
    $WL $SE $TINY
edit_spec "label: [label]" "label: [cat_1]"
expect "spec: a feature in two channels" 2 \
    "error: feature spec '.*': feature 'cat_1' is in two channels, channel_spec.categorical and channel_spec.label" \
    $WL $SE $TINY
edit_spec "{features: [cat_1], files: [train/cat_1.bin]" "{features: [cat_0], files: [train/cat_1.bin]"
expect "spec: a feature in two chunks" 2 \
    "error: feature spec '.*': feature 'cat_0' is listed twice, in source_spec.train\[2\].features and source_spec.train\[3\].features" \
    $WL $SE $TINY

# ---- class 3: paths too long, messages longer than a log line -----------------------------
long() { head -c "$1" /dev/zero | tr '\0' a; }
expect "--dump_weights too long" 2 'error: --dump_weights: too long \(4001 bytes; at most 4000\)' \
    $WL $SYN $TINY --dump_weights "$TMP/$(long $((4001 - ${#TMP} - 1)))"
expect "--dataset_path of 100 KB" 2 'error: --dataset_path: too long \(102400 bytes; at most 4000\)' \
    $WL --dataset_type split_binary --dataset_path "$(long 102400)" $TINY
expect "--log_path of 100 KB" 2 'error: --log_path: too long \(102400 bytes; at most 4000\)' \
    $W $SYN $TINY --log_path "$(long 102400)"
expect "plan --dataset_path of 100 KB" 2 'error: --dataset_path: too long \(102400 bytes; at most 4000\)' \
    $T plan --dataset_path "$(long 102400)"
# (a log line longer than the buffer keeps its end: tests/unit/common/test_log.c)

# ---- class 4: clear messages ----------------------------------------------------------------
mkdir -p "$TMP/dirspec/feature_spec.yaml"
expect "a directory as the feature spec" 2 "error: feature spec '.*/dirspec/feature_spec.yaml' is a directory, not a file" \
    $WL --dataset_type split_binary --dataset_path "$TMP/dirspec" $TINY
rm -rf "$TMP/t" && cp -r "$D" "$TMP/t" && truncate -s 7 "$TMP/t/train/label.bin"
expect "a truncated label.bin is the file named" 2 \
    "error: dataset file '.*/t/train/label.bin' has 7 bytes; the other files of split 'train' hold 8 samples, so it must have 8 \(1 per sample\)" \
    $WL --dataset_type split_binary --dataset_path "$TMP/t" $TINY
rm -rf "$TMP/t" && cp -r "$D" "$TMP/t" && truncate -s 6 "$TMP/t/test/cat_1.bin"
expect "a truncated cat_1.bin is the file named" 2 \
    "error: dataset file '.*/t/test/cat_1.bin' has 6 bytes; the other files of split 'test' hold 4 samples" \
    $WL --dataset_type split_binary --dataset_path "$TMP/t" $TINY
rm -rf "$TMP/t" && cp -r "$D" "$TMP/t" && rm "$TMP/t/train/cat_0.bin" && mkdir "$TMP/t/train/cat_0.bin"
expect "a directory as a dataset file" 2 "error: dataset file '.*/t/train/cat_0.bin' is a directory, not a regular file" \
    $WL --dataset_type split_binary --dataset_path "$TMP/t" $TINY
expect "an int out of range" 2 "error: --embedding_dim: '99999999999' is out of range \(1\.\.65536\)" \
    $WL $SYN $TINY --embedding_dim 99999999999
expect "an int64 that overflows" 2 "error: --max_steps: '99999999999999999999' is out of range \(-1\.\.1000000000000000\)" \
    $WL $SYN $TINY --max_steps 99999999999999999999
expect "a size that overflows" 2 "error: --memory_per_worker: '99999999999999999999G' is too large" \
    $T plan --cardinalities 5 --memory_per_worker 99999999999999999999G
expect "a list number that overflows" 2 \
    "error: --synthetic_dataset_cardinalities: '99999999999999999999' is out of range" \
    $WL $TINY --synthetic_dataset_cardinalities 99999999999999999999
# a write error names the file: /dev/full opens, and every write fails with ENOSPC
out=$($W $SYN $TINY --log_path /dev/full 2>&1); rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "error: cannot write the log file '/dev/full': No space left on device" \
    && ok "a log write error names the file and the errno text" || fail "a log write error names the file" "rc=$rc $out"

# ---- class 5: output paths checked before the model is allocated --------------------------
: >"$TMP/afile"
expect "--log_path in a non-directory" 2 "error: --log_path: cannot write '$TMP/afile/log.json': Not a directory" \
    $W $SYN $TINY --log_path "$TMP/afile/log.json"
expect "--dump_weights in a non-directory" 2 "error: cannot create directory '$TMP/afile/w': Not a directory" \
    $WL $SYN $TINY --dump_weights "$TMP/afile/w"
expect "--log_path a directory" 2 "error: --log_path: cannot write '$TMP': Is a directory" $W $SYN $TINY --log_path "$TMP"
out=$($W $SYN $TINY --log_path "$TMP/new/sub/log.json" --dump_weights "$TMP/neww/sub" 2>&1) \
    && [ -s "$TMP/new/sub/log.json" ] && [ -s "$TMP/neww/sub/rank0.bin" ] && [ "$(ls "$TMP/neww/sub")" = rank0.bin ] \
    && ok "missing output directories are created; no probe file is left" || fail "missing output directories" "$out"
echo keep >"$TMP/existing.json"
out=$($W $SYN $TINY --max_steps 0 --log_path "$TMP/existing.json" --dump_weights /proc/none 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(cat "$TMP/existing.json")" = keep ] && ok "a failed start leaves an existing log untouched" \
    || fail "a failed start leaves an existing log untouched" "rc=$rc $(cat "$TMP/existing.json") $out"
done_testing
