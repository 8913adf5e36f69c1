#!/usr/bin/env bash
# t2003: numeric guards (issue 8), real processes: a diverging run (--learning_rate
# 1e6) exits non-zero, quickly, naming the step and the tensor instead of reporting
# a normal-looking loss; NaN/inf in numerical.bin and a label that is not 0/1 stop
# the worker with the file and the row named; --nonfinite_inputs zero trains on
# the same files, exits 0 and reports how many values it replaced (console and the
# summary event); two MPI ranks that diverge both stop (no hang).
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
W=$TR_BIN/terarec-worker
PY=$(command -v python3)
cd "$TMP" || exit 1

# (a) the run of the report: 4 steps at --learning_rate 1e6. Before the guards it
# exited 0 with loss=2.4e16 and logloss=nan.
DIVERGE="--batch_size 256 --synthetic_dataset_cardinalities 26x100 --embedding_dim 8 --bottom_mlp_dims 16,8
         --top_mlp_dims 16,1 --max_steps 4 --threads 1 --learning_rate 1e6"
t0=$(date +%s)
out=$(timeout 120 $W $DIVERGE --log_path "$TMP/div.json" 2>&1)
rc=$?
t1=$(date +%s)
echo "$out" | grep -E 'error|hint' | sed 's/^/# /'
[ $rc -ne 0 ] && [ $rc -ne 124 ] && ok "lr 1e6: exits non-zero (status $rc)" || fail "lr 1e6: exits non-zero" "status $rc"
# the error names a step of the run (1..4) and a tensor: a layer's weights,
# gradient or output, or an embedding table
if echo "$out" | grep -qE 'error: (evaluation after )?step [1-4][:,]? .*(top_mlp_layer_[0-9]+|bottom_mlp_layer_[0-9]+|embedding table [0-9]+|bottom MLP output)'; then
    ok "lr 1e6: the error names the step and the tensor"
else
    fail "lr 1e6: the error names the step and the tensor" "$(echo "$out" | tail -n 5)"
fi
echo "$out" | grep -qE '^(validation|summary):' && fail "lr 1e6: no validation or summary line" "$out" ||
    ok "lr 1e6: no validation or summary line"
[ $((t1 - t0)) -le 60 ] && ok "lr 1e6: stops quickly ($((t1 - t0)) s)" || fail "lr 1e6: stops quickly" "$((t1 - t0)) s"

# (c) the same model diverging inside training (no warm-up): a gradient or a weight
# tensor is named at a step before the last, or (as now happens first here) the
# finite loss is caught running away (t2004), and no evaluation runs
out=$(timeout 120 $W $DIVERGE --warmup_steps 0 --print_freq 1 --log_path '' 2>&1)
rc=$?
if [ $rc -eq 2 ] &&
    echo "$out" | grep -qE 'error: step [1-4]: (the (gradient|weights) of (embedding table [0-9]+|the bottom MLP output|(top|bottom)_mlp_layer_[0-9]+ (kernel|bias))|diverged at step [1-4]: the loss is .* \(the logits of top_mlp_layer_1 saturate\))'; then
    ok "warm-up 0: training stops with exit 2 naming the step and the tensor"
else
    fail "warm-up 0: training stops with exit 2 naming the step and the tensor" "status $rc: $(echo "$out" | tail -n 4)"
fi

# (c) two ranks diverging together: both stop with an error, neither hangs
if command -v mpirun >/dev/null 2>&1; then
    use_mpi
    out=$(timeout 120 mpirun -np 2 $W $DIVERGE --threads 1 --warmup_steps 0 --print_freq 1 --log_path '' 2>&1)
    rc=$?
    nerr=$(echo "$out" | grep -cE 'error: step [1-4]: ')
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$nerr" -ge 2 ]; then
        ok "2 ranks: both stop at a step with an error (status $rc)"
    else
        fail "2 ranks: both stop at a step with an error" "status $rc, $nerr error lines: $(echo "$out" | tail -n 6)"
    fi
else
    skip "2 ranks: both stop at a step with an error" "mpirun not found"
fi

# (b) a small split-binary dataset from `terarec data prepare`: 600 rows, the last
# 150 the test split (450 training rows: 7 batches of 64, rows 448-449 dropped)
$PY - data.tsv <<'PYEOF'
import random, sys
rnd = random.Random(8002)
rows = []
for r in range(600):
    f = [str(rnd.randint(0, 1))] + [str(rnd.randint(0, 50)) for _ in range(13)]
    f += ["%08x" % rnd.randint(0, 20) for _ in range(26)]
    rows.append("\t".join(f))
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PYEOF
if ! $T data prepare --output ds --test_fraction 0.25 --no_shuffle data.tsv >prep.log 2>&1; then
    fail "prepare a dataset" "$(tail -n 5 prep.log)"
    done_testing
fi
nrows=$(($(stat -c %s ds/train/label.bin)))
[ "$nrows" -eq 450 ] && ok "prepared 450 training rows" || fail "prepared 450 training rows" "$nrows"

# poke FILE ROW FEATURE HEX: writes float16 HEX (little-endian) at ROW, FEATURE of a numerical.bin
poke() {
    $PY - "$@" <<'PYEOF'
import sys
path, row, feat, val = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4], 16)
with open(path, "r+b") as f:
    f.seek((row * 13 + feat) * 2)
    f.write(val.to_bytes(2, "little"))
PYEOF
}
cards=$(for i in $(seq 0 25); do sed -n "s/^  cat_$i\.bin: {cardinality: \([0-9]*\),.*/\1/p" ds/feature_spec.yaml; done |
        paste -sd, -)
TRAIN="--dataset_type split_binary --dataset_path $TMP/ds --batch_size 64 --embedding_dim 8 --bottom_mlp_dims 16,8
       --top_mlp_dims 16,1 --max_steps 7 --threads 1 --learning_rate 0.1 --warmup_steps 0 --print_freq 1"

out=$(timeout 120 $W $TRAIN --log_path '' 2>&1)
[ $? -eq 0 ] && ok "the clean dataset trains (cardinalities $cards)" || fail "the clean dataset trains" "$(echo "$out" | tail -n 5)"

cp -r ds ds.clean
poke ds/train/numerical.bin 37 5 7e00  # NaN
poke ds/train/numerical.bin 200 12 7c00 # +inf
poke ds/test/numerical.bin 3 0 fc00    # -inf
out=$(timeout 120 $W $TRAIN --log_path '' 2>&1)
rc=$?
echo "$out" | grep -E 'error|hint' | sed 's/^/# /'
[ $rc -eq 2 ] && ok "NaN in numerical.bin: exit 2" || fail "NaN in numerical.bin: exit 2" "status $rc"
echo "$out" | grep -qF "error: dataset file '$TMP/ds/train/numerical.bin': row 37 (sample 37), numerical feature 5 of 13 is NaN" &&
    ok "NaN in numerical.bin: the error names the file, row 37 and the feature" ||
    fail "NaN in numerical.bin: the error names the file, row 37 and the feature" "$(echo "$out" | tail -n 3)"
echo "$out" | grep -qE '^step=' && fail "NaN in numerical.bin: no step ran" "$out" || ok "NaN in numerical.bin: no step ran"

# the +inf alone (row 200, batch 3): three steps run, then the error names row 200
cp ds.clean/train/numerical.bin ds/train/numerical.bin
poke ds/train/numerical.bin 200 12 7c00
out=$(timeout 120 $W $TRAIN --log_path '' 2>&1)
rc=$?
if [ $rc -eq 2 ] && echo "$out" | grep -qF "train/numerical.bin': row 200 (sample 200), numerical feature 12 of 13 is +inf" &&
    [ "$(echo "$out" | grep -c '^step=')" -eq 3 ]; then
    ok "inf in numerical.bin: stops at the batch holding row 200, naming it"
else
    fail "inf in numerical.bin: stops at the batch holding row 200, naming it" "status $rc: $(echo "$out" | tail -n 4)"
fi

# --nonfinite_inputs zero: NaN at 37, +inf at 200 (train), -inf at test row 3; one
# epoch (7 steps) and one evaluation read each once: 2 + 1 replaced
poke ds/train/numerical.bin 37 5 7e00
out=$(timeout 120 $W $TRAIN --nonfinite_inputs zero --log_path "$TMP/zero.json" 2>&1)
rc=$?
[ $rc -eq 0 ] && ok "--nonfinite_inputs zero: trains and exits 0" || fail "--nonfinite_inputs zero: trains and exits 0" "status $rc: $(echo "$out" | tail -n 4)"
echo "$out" | grep -qE '^validation: step=7, auc=0\.[0-9]+' && ok "--nonfinite_inputs zero: evaluates" ||
    fail "--nonfinite_inputs zero: evaluates" "$(echo "$out" | tail -n 4)"
echo "$out" | grep -qF 'nonfinite inputs: 3 NaN/inf numerical values replaced by 0 (--nonfinite_inputs zero): 2 in training batches, 1 in test batches' &&
    ok "--nonfinite_inputs zero: the console reports 2 + 1 replaced" ||
    fail "--nonfinite_inputs zero: the console reports 2 + 1 replaced" "$(echo "$out" | grep -i nonfinite)"
got=$($PY -c 'import json,sys
recs = [json.loads(l[5:]) for l in open(sys.argv[1]) if l.startswith("DLLL ")]
final = [r for r in recs if r["step"] == []][-1]["data"]
print(final["nonfinite_inputs_replaced"]["train"], final["nonfinite_inputs_replaced"]["test"])' "$TMP/zero.json" 2>&1)
[ "$got" = "2 1" ] && ok "--nonfinite_inputs zero: the summary event counts train 2, test 1" ||
    fail "--nonfinite_inputs zero: the summary event counts train 2, test 1" "$got"

# a label byte of 2: refused whatever --nonfinite_inputs says
cp ds.clean/train/numerical.bin ds/train/numerical.bin
cp ds.clean/test/numerical.bin ds/test/numerical.bin
printf '\x02' | dd of=ds/train/label.bin bs=1 seek=10 conv=notrunc status=none
for mode in error zero; do
    out=$(timeout 120 $W $TRAIN --nonfinite_inputs $mode --log_path '' 2>&1)
    rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -qF "error: dataset file '$TMP/ds/train/label.bin': row 10 (sample 10) holds label 2" &&
        ok "label 2 (--nonfinite_inputs $mode): exit 2 naming label.bin and row 10" ||
        fail "label 2 (--nonfinite_inputs $mode): exit 2 naming label.bin and row 10" "status $rc: $(echo "$out" | tail -n 3)"
done

done_testing
