#!/usr/bin/env bash
# t0001: terarec-worker's command line: --help, --version, and bad input rejected
# with one error line naming the flag, exit status 2, and no log file written.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker

out=$($W --help 2>&1) && echo "$out" | grep -q -- '--batch_size N' && echo "$out" | grep -q -- '--optimizer CHOICE' \
    && ok "--help lists the options" || fail "--help lists the options" "$out"
out=$($W --version 2>&1) && echo "$out" | grep -qE '^terarec-worker [0-9]+\.[0-9]+\.[0-9]+ \(git ' \
    && ok "--version" || fail "--version" "$out"
out=$($W --version --parsable 2>&1) && echo "$out" | grep -q '^blas:' && echo "$out" | grep -q '^cuda:' \
    && echo "$out" | grep -qE '^backends:(cuda,)?cpu$' \
    && ok "--version --parsable" || fail "--version --parsable" "$out"

# bad_input NAME EXPECTED_REGEX FLAGS...: exit 2, an error line matching, no log file
bad_input() {
    local name=$1 re=$2; shift 2
    local log=$TMP/log.json out rc
    rm -f "$log"
    out=$($W --log_path "$log" --max_steps 1 "$@" 2>&1); rc=$?
    local nerr
    nerr=$(echo "$out" | grep -c ' error: ')
    if [ $rc -eq 2 ] && [ "$nerr" -eq 1 ] && echo "$out" | grep -qE "$re" && [ ! -e "$log" ]; then
        ok "$name"
    else
        fail "$name" "rc=$rc errors=$nerr log=$([ -e "$log" ] && echo written || echo none): $out"
    fi
}
bad_input "batch_size 0 rejected" "error: --batch_size: '0' is outside" --batch_size 0
bad_input "non-integer rejected" "error: --embedding_dim: 'x' is not an integer" --embedding_dim x
bad_input "unknown option rejected" "error: unknown option '--bogus_flag'" --bogus_flag 3
bad_input "bad enum rejected" "error: --optimizer: 'adam' is not one of sgd\|adagrad" --optimizer adam
bad_input "bad list rejected" "error: --synthetic_dataset_cardinalities: '1,,2' is not" --synthetic_dataset_cardinalities 1,,2
bad_input "zero cardinality rejected" "error: --synthetic_dataset_cardinalities: '0' is outside" --synthetic_dataset_cardinalities 5,0
bad_input "bottom width must equal dim" "error: --bottom_mlp_dims: last width 32 must equal --embedding_dim 16" \
    --embedding_dim 16 --bottom_mlp_dims 64,32
bad_input "top must end in 1" "error: --top_mlp_dims: .*last width must be 1" --top_mlp_dims 64,2
bad_input "missing value rejected" "error: --learning_rate: missing value" --learning_rate
out=$(TR_BATCH_SIZE=-3 $W --log_path "$TMP/l2.json" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "environment TR_BATCH_SIZE for --batch_size: '-3' is outside" \
    && ok "TR_BATCH_SIZE=-3 rejected" || fail "TR_BATCH_SIZE=-3 rejected" "rc=$rc $out"
out=$($W --bottom_mlp_dims 64,32 --embedding_dim 16 2>&1); echo "$out" | grep -q '^.* hint: ' \
    && ok "relational errors carry a hint line" || fail "relational errors carry a hint line" "$out"

# dash spelling and --no_ booleans are accepted: a tiny run completes
out=$($W --batch-size 64 --synthetic-dataset-cardinalities 3x10 --embedding-dim 4 --bottom-mlp-dims 4 \
      --top-mlp-dims 4,1 --max-steps 2 --synthetic-dataset-valid-batches 1 --log-path "$TMP/ok.json" 2>&1) \
    && [ -s "$TMP/ok.json" ] && ok "dash spelling accepted" || fail "dash spelling accepted" "$out"
# one name, one meaning: --resume takes an optional RUN (bare: --run_name's run), and
# the old boolean's spellings still work; --checkpoint_dir and --run_name show their aliases
out=$($W --help 2>&1)
echo "$out" | grep -qE -- '--resume \[TEXT\] +\[RUN\]' && echo "$out" | grep -q -- '--run_name TEXT .*(alias --name)' &&
    echo "$out" | grep -q -- '--checkpoint_dir PATH .*(alias --save_checkpoint_path)' &&
    ok "--help: --resume [RUN], --run_name (alias --name), --checkpoint_dir (alias --save_checkpoint_path)" ||
    fail "--help shows the flags' one spelling" "$(echo "$out" | grep -E -- '--(resume|run_name|checkpoint_dir) ')"
bad_input "--resume RUN and another --run_name refused" "error: --resume a and --run_name b name different runs" \
    --resume a --run_name b
TINY="--batch_size 64 --synthetic_dataset_cardinalities 3x10 --embedding_dim 4 --bottom_mlp_dims 4 --top_mlp_dims 4,1
      --synthetic_dataset_valid_batches 1 --threads 1 --log_path= --checkpoint_dir $TMP/st"
out=$($W $TINY --max_steps 2 --name sp 2>&1) && [ "$(cat "$TMP/st/runs/sp/LATEST" 2>/dev/null)" = 2 ] &&
    ok "--name (the old spelling of --run_name) names the run" || fail "--name" "$out"
out=$($W $TINY --max_steps 3 --resume sp 2>&1) && echo "$out" | grep -q "restored --resume .*#sp@2: step 2" &&
    [ "$(cat "$TMP/st/runs/sp/LATEST")" = 3 ] && ok "--resume RUN continues run RUN" || fail "--resume RUN" "$out"
out=$($W $TINY --max_steps 4 --run_name sp --resume=true 2>&1) && echo "$out" | grep -q "#sp@3: step 3" &&
    [ "$(cat "$TMP/st/runs/sp/LATEST")" = 4 ] && ok "--run_name RUN --resume=true (the boolean's spelling)" ||
    fail "--resume=true" "$out"
out=$(TR_RESUME=1 $W $TINY --max_steps 5 --run_name sp 2>&1) && echo "$out" | grep -q "#sp@4: step 4" &&
    ok "TR_RESUME=1 resumes too" || fail "TR_RESUME=1" "$out"
out=$($W $TINY --max_steps 6 --run_name sp --resume --no_resume 2>&1); rc=$?
[ $rc -eq 2 ] && ! echo "$out" | grep -q "restored" && ok "--no_resume unsets --resume: run 'sp' is taken (exit 2)" ||
    fail "--no_resume" "rc=$rc $out"

# the ranks agree on every option but the rank-local ones (--threads): started
# with their own --threads they train; with their own --learning_rate they stop
if command -v mpirun >/dev/null 2>&1; then
    use_mpi
    RUN="--batch_size 64 --synthetic_dataset_cardinalities 3x10 --embedding_dim 4 --bottom_mlp_dims 4 --top_mlp_dims 4,1
         --synthetic_dataset_valid_batches 1 --max_steps 2 --log_path="
    out=$(timeout 120 mpirun -np 1 $W $RUN --threads 1 : -np 1 $W $RUN --threads 2 2>&1) &&
        ok "2 ranks with their own --threads train (a rank-local option)" || fail "ranks' own --threads" "$out"
    out=$(timeout 120 mpirun -np 1 $W $RUN --learning_rate 0.5 : -np 1 $W $RUN --learning_rate 0.25 2>&1); rc=$?
    [ $rc -ne 0 ] && echo "$out" | grep -q "disagree on the training config: --learning_rate is '0.5' on rank 0 but '0.25' on rank 1" &&
        ok "2 ranks with their own --learning_rate are refused, naming the flag" || fail "ranks' own --learning_rate" "rc=$rc $out"
else
    skip "rank-local options" "mpirun not found"
fi

done_testing
