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
done_testing
