#!/usr/bin/env bash
# t4004: a bad dataset under `terarec train` (issue 32, item 9) is on the console
# within seconds, naming the file, with the loader's hint (not a wait for
# --loader_timeout and a hint about starting a loader):
# - a dataset directory that does not exist, and a truncated file: one error before
#   anything starts (exit 2, no run row);
# - a file whose content the loader refuses only when it reads it (a label of 5):
#   the launcher sees the loader fail, prints its error and hint lines, and ends the
#   run failed (exit 1) naming the loader's error.
# The datasets are t0002's (make_dataset, taken from there).
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
PY=$(command -v python3)
cd "$TMP" || exit 1
DB=$TMP/hist/runs.db
TINY="--batch_size 4 --embedding_dim 4 --bottom_mlp_dims 4 --top_mlp_dims 4,1 --max_steps 2 --threads 1"
eval "$(sed -n '/^make_dataset() {/,/^}/p' "$TR_ROOT/tests/integration/t0002-bad-input.sh")"
make_dataset "$TMP/ds"
q() {
    python3 - "$DB" "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], timeout=30)
for r in c.execute(sys.argv[2]):
    print("|".join("" if v is None else str(v) for v in r))
PY
}
# run NAME DATASET: terarec train on DATASET; sets $out, $rc, $secs
run() {
    local t0
    t0=$(date +%s.%N)
    out=$(timeout 120 $T train --db "$DB" --dataset_type split_binary --dataset_path "$2" $TINY --name "$1" \
          </dev/null 2>&1)
    rc=$?
    secs=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")
}
nrows() { q "select count(*) from runs where name = '$1'" 2>/dev/null || echo 0; }

run good "$TMP/ds"
[ $rc -eq 0 ] && ok "the unedited dataset trains under terarec train" || fail "the unedited dataset trains" "$out"

run nodir "$TMP/nope"
[ $rc -eq 2 ] && echo "$out" | grep -q "error: --dataset_path $TMP/nope: No such file or directory" &&
    [ "$(nrows nodir)" = 0 ] && ok "a missing dataset directory: exit 2 in $secs s, named, no run row" ||
    fail "a missing dataset directory" "exit $rc after $secs s: $out"

cp -r ds trunc && truncate -s 7 trunc/train/label.bin
run trunc "$TMP/trunc"
[ $rc -eq 2 ] && awk "BEGIN{exit !($secs <= 10)}" &&
    echo "$out" | grep -q "error: dataset file '$TMP/trunc/train/label.bin' has 7 bytes" &&
    [ "$(echo "$out" | grep -c ' error: ')" -eq 1 ] && echo "$out" | grep -q ' hint: ' && [ "$(nrows trunc)" = 0 ] &&
    ok "a truncated label.bin: one error naming it, with a hint, in $secs s, before anything starts" ||
    fail "a truncated label.bin" "exit $rc after $secs s: $(echo "$out" | tail -n 6)"

cp -r ds badlabel && printf '\x05' | dd of=badlabel/train/label.bin bs=1 seek=3 conv=notrunc 2>/dev/null
run badlabel "$TMP/badlabel"
row=$(q "select status, reason from runs where name = 'badlabel'")
[ $rc -eq 1 ] && awk "BEGIN{exit !($secs <= 15)}" &&
    echo "$out" | grep -q "^terarec: the loader failed (exit 2); its log .*/loader.log says:" &&
    echo "$out" | grep -q "^  error: dataset file '$TMP/badlabel/train/label.bin': row 3 (sample 3) holds label 5" &&
    echo "$out" | grep -q "^  hint: label.bin holds one byte per sample" &&
    ! echo "$out" | grep -q "hint: start 'terarec-loader" &&
    ok "a label of 5: the loader's error and hint on the console in $secs s, exit 1" ||
    fail "a label of 5 on the console" "exit $rc after $secs s: $(echo "$out" | grep -v '^step' | tail -n 12)"
echo "$row" | grep -q "^failed|the loader failed: dataset file '$TMP/badlabel/train/label.bin': row 3" &&
    ok "a label of 5: the run recorded failed with the loader's error" || fail "the run's reason" "$row"

done_testing
