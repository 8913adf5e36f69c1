#!/usr/bin/env bash
# t2004: a run that diverges while staying finite stops with "diverged at step k"
# and a hint (exit 2), a healthy run does not; a warm-up longer than the run is
# warned about; Adagrad with epsilon and initial accumulator both 0 is refused up
# front, and a NaN it causes later is blamed on it, not on the learning rate; the
# default DLLogger file's location is printed.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
S="--batch_size 256 --synthetic_dataset_cardinalities 26x100 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --threads 1 --synthetic_dataset_valid_batches 1"

out=$($W $S --max_steps 6 --learning_rate 1e6 --log_path= </dev/null 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -qE 'error: step [0-9]+: diverged at step [0-9]+: the loss is [0-9.e+]+, over 100 times the first step.s 0\.[0-9]+ \(the logits of top_mlp_layer_1 saturate\)' &&
    echo "$out" | grep -q 'hint: lower --learning_rate (now 1e+06)' &&
    ok "lr 1e6: stops with 'diverged at step k' and a hint (exit 2)" ||
    fail "lr 1e6: stops with 'diverged at step k'" "exit $rc: $(echo "$out" | tail -n 4)"

out=$($W $S --max_steps 40 --learning_rate 1 --warmup_steps 0 --log_path= </dev/null 2>&1)
rc=$?
[ $rc -eq 0 ] && ! echo "$out" | grep -q 'diverged' && ok "a healthy run (lr 1, 40 steps) is not taken for a divergence" ||
    fail "a healthy run is not taken for a divergence" "exit $rc: $(echo "$out" | tail -n 4)"
echo "$out" | grep -q 'warmup_steps' && fail "no warm-up warning with --warmup_steps 0" "$out" ||
    ok "no warm-up warning with --warmup_steps 0"

out=$($W $S --max_steps 300 --log_path= </dev/null 2>&1)
echo "$out" | grep -qE 'warn: --warmup_steps 8000 is longer than the run \(300 steps\): the learning rate ends at 0\.897, 3\.74% of --learning_rate 24' &&
    ok "the default 8000 warm-up steps on a 300-step run are warned about, with the final rate" ||
    fail "warm-up longer than the run is warned about" "$(echo "$out" | grep -E 'warn|error')"

out=$($W $S --max_steps 3 --optimizer adagrad --adagrad_epsilon 0 --adagrad_initial_accumulator_value 0 --log_path= </dev/null 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q 'error: --adagrad_epsilon 0 with --adagrad_initial_accumulator_value 0 divides 0 by 0' &&
    ok "Adagrad with epsilon 0 and accumulator 0 is refused before training (exit 2)" ||
    fail "Adagrad with epsilon 0 and accumulator 0 is refused" "exit $rc: $(echo "$out" | tail -n 3)"

# an accumulator that starts at 0 in float (1e-300) without epsilon: NaN weights after
# step 1; the gradient guard names the step and the tensor, and the hint names
# the Adagrad flags, not the learning rate
out=$($W $S --max_steps 5 --optimizer adagrad --learning_rate 0.05 --warmup_steps 0 --adagrad_epsilon 0 \
    --adagrad_initial_accumulator_value 1e-300 --log_path= </dev/null 2>&1)
rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -qE 'error: step 2: the gradient of .* holds NaN or inf' &&
    echo "$out" | grep -q 'hint: --adagrad_epsilon 0 with --adagrad_initial_accumulator_value 1e-300' &&
    ! echo "$out" | grep -q 'hint: lower --learning_rate' &&
    ok "Adagrad without epsilon: NaN at step 2 is blamed on the Adagrad flags, not the learning rate" ||
    fail "Adagrad without epsilon: NaN blamed on the Adagrad flags" "exit $rc: $(echo "$out" | tail -n 3)"

mkdir -p "$TMP/cwd"
out=$(cd "$TMP/cwd" && $W $S --max_steps 2 </dev/null 2>&1)
real=$(cd "$TMP/cwd" && pwd -P)
echo "$out" | grep -qx "log: DLLogger records go to $real/dlrm_tf_log.json" && [ -s "$TMP/cwd/dlrm_tf_log.json" ] &&
    ok "the default DLLogger file's location is printed (and it is there)" ||
    fail "the default DLLogger file's location is printed" "$(echo "$out" | grep -E '^log|error')"

done_testing
