#!/usr/bin/env bash
# t4006: which job `terarec train` runs (issue 34), shown with --dry_run (nothing starts):
# - no flags, or only flags that do not define the data or the model (--threads,
#   --seed, TR_SEED, --checkpoint_dir, --workers, --max_steps, --epochs): the built-in
#   demo, with those flags on top of it (--max_steps changes its steps), and the line
#   naming it with its size and an estimate;
# - a model flag: the job the flags define, named with the flags that made it;
# - --dataset_path without --dataset_type: a directory holding a FeatureSpec trains
#   as split_binary (terarec train, terarec-worker, terarec plan; an info line says
#   so); one holding the seed's layout without a spec is split_binary too (the
#   loader then names the missing spec); one holding neither is one error naming the
#   path, with a hint.
# The dataset is t0002's (make_dataset, taken from there).
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
W=$TR_BIN/terarec-worker
PY=$(command -v python3)
cd "$TMP" || exit 1
export TR_DB=$TMP/runs.db
eval "$(sed -n '/^make_dataset() {/,/^}/p' "$TR_ROOT/tests/integration/t0002-bad-input.sh")"
make_dataset "$TMP/ds"
DEMO='terarec: the built-in demo (no model or data flags'
# dry FLAGS...: terarec train --dry_run FLAGS; sets $out (stdout and stderr), $rc, $job
# (the line naming the job) and $wk (the workers' command)
dry() {
    out=$($T train --dry_run "$@" 2>&1)
    rc=$?
    job=$(echo "$out" | grep '^terarec: the ')
    wk=$(echo "$out" | grep '^workers: ')
}

dry
[ $rc -eq 0 ] && [[ $job == "$DEMO): 300 steps of 2048, 26 tables x 100000 rows, dim 16, about "*" here (an estimate)" ]] &&
    [[ $wk == *" --embedding_dim=16 "*" --max_steps=300 "* ]] && ok "no flags: the demo, named with its size" ||
    fail "no flags: the demo" "exit $rc: $out"

for f in "--threads 1" "--seed 7" "--checkpoint_dir $TMP/ck" "--learning_rate 0.5" "--workers 2"; do
    dry $f
    on=${f%% *}
    [ "$on" = --workers ] && on="" || on="; on top of it: $on" # the workers' flags are named
    [ $rc -eq 0 ] && [[ $job == "$DEMO$on): 300 steps of 2048, 26 tables x 100000 rows, dim 16,"* ]] &&
        [[ $wk == *" --embedding_dim=16 "*" --max_steps=300 "* ]] && ok "$f: the demo, $f on top" ||
        fail "$f keeps the demo" "exit $rc: $out"
done

TR_SEED=7 dry --threads 1
[ $rc -eq 0 ] && [[ $job == "$DEMO; on top of it: TR_SEED, --threads): 300 steps of 2048,"* ]] &&
    [[ $wk == *" --seed=7 "* ]] && ok "TR_SEED: the demo, the variable named" || fail "TR_SEED keeps the demo" "$out"

dry --max_steps 50 --threads 1
[ $rc -eq 0 ] && [[ $job == "$DEMO; on top of it: --max_steps, --threads): 50 steps of 2048,"* ]] &&
    [[ $wk == *" --max_steps=50 "* && $wk != *"--max_steps=300"* ]] && ok "--max_steps 50: the demo, 50 steps" ||
    fail "--max_steps 50 on the demo" "$out"

dry --epochs 2
[ $rc -eq 0 ] && [[ $job == "$DEMO; on top of it: --epochs): 128016 steps of 2048,"* ]] && [[ $wk != *--max_steps* ]] &&
    ok "--epochs 2: the demo, two epochs (no --max_steps to conflict with)" || fail "--epochs on the demo" "$out"

dry --embedding_dim 8 --bottom_mlp_dims 16,8 --threads 1
[ $rc -eq 0 ] &&
    [[ $job == "terarec: the job your flags define (--embedding_dim, --bottom_mlp_dims): 64008 steps of 65536, 26 tables x 1000 rows, dim 8, about "* ]] &&
    [[ $wk != *--max_steps* && $wk != *--batch_size* ]] && ok "a model flag: the job the flags define, named" ||
    fail "a model flag leaves the demo" "$out"

# ---- --dataset_path alone ----------------------------------------------------------------------
TINY="--batch_size 4 --embedding_dim 4 --bottom_mlp_dims 4 --top_mlp_dims 4,1 --max_steps 2 --threads 1"
out=$(timeout 120 $T train --dataset_path "$TMP/ds" $TINY --name ds </dev/null 2>&1)
rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "info.*--dataset_path $TMP/ds holds feature_spec.yaml: --dataset_type split_binary" &&
    echo "$out" | grep -q "^terarec: the job your flags define (--dataset_path, --embedding_dim, --bottom_mlp_dims, --top_mlp_dims): 2 steps of 4, 2 tables, 12 rows in all, dim 4" &&
    echo "$out" | grep -q "completed" && ok "terarec train --dataset_path (no --dataset_type): split_binary, trained" ||
    fail "terarec train --dataset_path alone" "exit $rc: $out"

out=$(timeout 60 $W --dataset_path "$TMP/ds" $TINY --log_path '' 2>&1)
rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "holds feature_spec.yaml: --dataset_type split_binary" &&
    ok "terarec-worker --dataset_path alone: trains" || fail "terarec-worker --dataset_path alone" "exit $rc: $out"

out=$($T plan --dataset_path "$TMP/ds" --embedding_dim 4 --bottom_mlp_dims 4 --top_mlp_dims 4,1 2>&1)
rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "^fits: yes" && ok "terarec plan --dataset_path alone" ||
    fail "terarec plan --dataset_path alone" "exit $rc: $out"

mkdir -p "$TMP/empty" "$TMP/seed/train" && cp "$TMP/ds/train/label.bin" "$TMP/seed/train/"
for p in "$T train --dry_run" "$W" "$T plan"; do
    out=$($p --dataset_path "$TMP/empty" 2>&1)
    rc=$?
    [ $rc -eq 2 ] && [ "$(echo "$out" | grep -c ' error: ')" = 1 ] &&
        echo "$out" | grep -q "error: --dataset_path $TMP/empty: holds no dataset (no feature_spec.yaml, no train/label.bin)" &&
        echo "$out" | grep -q "hint: " && ok "${p##*/}: a --dataset_path that holds no dataset: one error and a hint" ||
        fail "${p##*/} --dataset_path of an empty directory" "exit $rc: $out"
done
out=$($W --dataset_path "$TMP/seed" $TINY --log_path '' 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "holds train/label.bin: --dataset_type split_binary" &&
    echo "$out" | grep -q "error: .*feature_spec.yaml" && ok "the seed's layout without a spec: split_binary, the spec named" ||
    fail "the seed's layout without a spec" "exit $rc: $out"

done_testing
