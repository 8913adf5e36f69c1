#!/usr/bin/env bash
# real_auc.sh [--seeds "1 2 3"] [--epochs N]: model quality on real Criteo rows, terarec
# against a standard PyTorch DLRM, with the epoch chosen on a validation split.
#
# Data: ../shared/data/criteo_sample/kaggle_train_random_0p3pct.tsv (or
# $TR_CRITEO_SAMPLE/...; Criteo terms: testing only, never copied into the repository),
# split by position (the rows are in roughly chronological order): test = the last 10%,
# validation = the 10% before it, train = the rest. The three parts go to a temporary
# directory and `terarec data prepare` (hash mode, R = 100000 rows per table,
# --hash_missing reserved, --numerical_transform log1p: the reference pipelines' rules)
# makes two datasets with byte-identical train files (checked with cmp):
#   V = train + validation (as its "test" split), T = train + test.
# terarec-worker evaluates only a dataset's "test" split, so each terarec model trains
# twice with the same seed, on V and on T; training is bitwise deterministic for a fixed
# seed and data, which the script checks twice and stops if either differs: the two
# DLLogger logs' loss records (mean loss of every 100-step interval; a record every step
# would cost a full-table weight check per step) and the final weights (--dump_weights,
# cmp). The epoch with the best validation AUC (V run) is chosen, and the T run's test
# AUC at that epoch is reported. The PyTorch models
# (bench/torch_real_auc.py) read the same prepared files and do the same in one process.
#
# Rows: terarec dot + Adagrad, dot + rowwise Adagrad, DCNv2 (2 low-rank-64 cross
# layers), with terarec's Adagrad defaults (Keras: accumulator 0.1, eps 1e-7), then
# dot and DCNv2 again with torch.optim.Adagrad's (accumulator 0, eps 1e-10), the
# like-for-like comparison with PyTorch; PyTorch DLRM (dot; facebookresearch/dlrm initialisation, torch.optim.Adagrad
# defaults), PyTorch DCNv2, logistic regression. A terarec row whose
# flags this build lacks prints "not available in this build". Not part of `make test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seeds="1 2 3"; epochs=12
while [ $# -gt 0 ]; do
    case $1 in
    --seeds) seeds=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    *) echo "usage: $0 [--seeds \"1 2 3\"] [--epochs N]" >&2; exit 2 ;;
    esac
done
data=${TR_CRITEO_SAMPLE:-$root/../shared/data/criteo_sample}/kaggle_train_random_0p3pct.tsv
[ -r "$data" ] || { echo "skipped: $data not found (the Criteo sample is not in the repository)"; exit 0; }
[ -x "$root/build/bin/terarec" ] && [ -x "$root/build/bin/terarec-worker" ] || make -C "$root" -s -j2 >/dev/null
PY=/usr/bin/python3
export OMP_NUM_THREADS=2
TERAREC=$root/build/bin/terarec
WORKER=$root/build/bin/terarec-worker
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT; trap 'exit 130' INT TERM
t_start=$(date +%s)

# --- split by position and prepare ---------------------------------------------------
n=$(wc -l < "$data")
nt=$(( (n + 5) / 10 )); ntr=$(( n - 2 * nt ))
head -n "$ntr" "$data" > "$tmp/train.tsv"
sed -n "$((ntr + 1)),$((ntr + nt))p" "$data" > "$tmp/valid.tsv"
tail -n "$nt" "$data" > "$tmp/test.tsv"
PREP="--max_ind_range 100000 --hash_missing reserved --numerical_transform log1p --test_files 1 --threads 2 --no_progress"
"$TERAREC" data prepare --output "$tmp/V" $PREP "$tmp/train.tsv" "$tmp/valid.tsv" > "$tmp/prep_v.txt"
"$TERAREC" data prepare --output "$tmp/T" $PREP "$tmp/train.tsv" "$tmp/test.tsv" > "$tmp/prep_t.txt"
rm -f "$tmp"/*.tsv
for f in "$tmp"/V/train/* "$tmp/V/feature_spec.yaml"; do
    g=$tmp/T/${f#"$tmp"/V/}
    cmp -s "$f" "$g" || { echo "error: '${f#"$tmp"/}' and '${g#"$tmp"/}' differ: the two datasets' train files must be byte-identical" >&2; exit 1; }
done
[ "$(ls "$tmp/V/train" | wc -l)" = "$(ls "$tmp/T/train" | wc -l)" ] || { echo "error: V and T hold different train file sets" >&2; exit 1; }
echo "data: $(basename "$data"), $n rows by position: train $ntr, validation $nt, test $nt (last); label rate" \
     "$($PY -c 'import numpy as np,sys; print(", ".join("%s %.3f" % (k, np.fromfile(p, np.uint8).mean()) for k, p in zip(("train","valid","test"), sys.argv[1:])))' \
        "$tmp/V/train/label.bin" "$tmp/V/test/label.bin" "$tmp/T/test/label.bin")"
echo "prepare: terarec data prepare $PREP (train files of V and T byte-identical: checked)"

# --- what this build supports --------------------------------------------------------
help=$("$WORKER" --help)
has_opt() { grep -q -- "^ *--$1 " <<<"$help"; }
opt_line() { grep -- "^ *--$1 " <<<"$help" || true; }
SHUF=()
if has_opt shuffle_samples; then
    SHUF=(--shuffle_samples)
    echo "data order: terarec --seed s --shuffle_samples (seeded per-epoch permutation); PyTorch: torch.randperm per epoch, seeded"
else
    echo "NOTE: this terarec-worker has no --shuffle_samples: terarec seeds vary the initialisation only; every epoch"
    echo "      reads the train rows in the one order prepare shuffled them into. PyTorch runs still shuffle per epoch."
fi
avail_rowwise=0; avail_dcn=0
opt_line optimizer | grep -q rowwise_adagrad && avail_rowwise=1
opt_line interaction | grep -q dcnv2 && has_opt dcn_num_layers && has_opt dcn_low_rank_dim && avail_dcn=1

MODEL=(--batch_size 256 --epochs "$epochs" --embedding_dim 16 --bottom_mlp_dims 64,16 --top_mlp_dims 64,1
       --learning_rate 0.015)
TR_COMMON=(--dataset_type split_binary "${MODEL[@]}" --warmup_steps 0 --decay_start_step 100000000
           --evals_per_epoch 1 --threads 2 --print_freq 100 "${SHUF[@]}")
echo "model: embedding dim 16, bottom MLP 64,16, top MLP 64,1, batch 256, Adagrad lr 0.015, no warm-up or decay," \
     "$epochs epochs, one evaluation per epoch, epoch chosen on validation"
DCN=(--dcn_num_layers 2 --dcn_low_rank_dim 64)
ADA0=(--adagrad_initial_accumulator_value 0 --adagrad_epsilon 1e-10)

res=$tmp/results.txt; : > "$res"
# terarec_row NAME SEED ARGS...: trains on V and on T, checks the loss sequences, appends a result
terarec_row() {
    local name=$1 seed=$2; shift 2
    local t0 t1 d=$tmp/run_${name}_$seed
    mkdir -p "$d"
    t0=$(date +%s.%N)
    "$WORKER" "${TR_COMMON[@]}" "$@" --seed "$seed" --dataset_path "$tmp/V" --log_path "$d/v.json" --dump_weights "$d/wv" > "$d/v.out" 2>&1 ||
        { echo "error: terarec $name seed $seed (V) failed:" >&2; tail -n 5 "$d/v.out" >&2; exit 1; }
    "$WORKER" "${TR_COMMON[@]}" "$@" --seed "$seed" --dataset_path "$tmp/T" --log_path "$d/t.json" --dump_weights "$d/wt" > "$d/t.out" 2>&1 ||
        { echo "error: terarec $name seed $seed (T) failed:" >&2; tail -n 5 "$d/t.out" >&2; exit 1; }
    t1=$(date +%s.%N)
    cmp -s "$d/wv/rank0.bin" "$d/wt/rank0.bin" ||
        { echo "error: terarec $name seed $seed: the final weights of the V and T runs differ: training is not deterministic" \
               "here, so the test AUC at the validation-chosen epoch cannot be read from the T run" >&2; exit 1; }
    rm -rf "$d/wv" "$d/wt"
    $PY - "$d/v.json" "$d/t.json" "$name" "$seed" "$epochs" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" >> "$res" <<'PYEOF' ||
import json, sys
vpath, tpath, name, seed, epochs, secs = sys.argv[1:7]
def read(path):
    loss, auc, param = [], [], {}
    for line in open(path):
        r = json.loads(line.split(" ", 1)[1])
        if r["step"] == "PARAMETER":
            param.update(r["data"])
        elif isinstance(r["step"], int) and "loss" in r["data"]:
            loss.append((r["step"], r["data"]["loss"]))
        elif isinstance(r["step"], int) and "auc" in r["data"]:
            auc.append((r["step"], r["data"]["auc"]))
    return loss, auc, param
vl, va, vp = read(vpath)
tl, ta, tp = read(tpath)
if not vl or vl != tl:
    diff = next((i for i, (a, b) in enumerate(zip(vl, tl)) if a != b), min(len(vl), len(tl)))
    sys.exit("error: terarec %s seed %s: the V and T runs' logged losses differ (first at record %d of %d/%d); "
             "training is not deterministic here, so the test AUC at the validation-chosen epoch cannot be "
             "read from the T run" % (name, seed, diff, len(vl), len(tl)))
if len(va) != int(epochs) or [s for s, _ in va] != [s for s, _ in ta]:
    sys.exit("error: terarec %s seed %s: expected %s evaluations per run, got %d and %d" % (name, seed, epochs, len(va), len(ta)))
best = max(range(len(va)), key=lambda i: (va[i][1], -i))
print("terarec_%s %s %d %.6f %.6f %s %d acc=%s eps=%s" % (name, seed, best + 1, va[best][1], ta[best][1], secs,
      len(vl), vp.get("adagrad_initial_accumulator_value"), vp.get("adagrad_epsilon")))
PYEOF
        exit 1
    tail -n 1 "$res" | awk -v n="$name" '{printf "seed %s: terarec %-15s epoch %2d of %s: valid auc %s, test auc %s (%.1f s for both runs; %d logged losses and the final weights identical in V and T)\n", $2, n, $3, '"$epochs"', $4, $5, $6, $7}'
}
torch_row() {
    local model=$1 seed=$2 out
    out=$($PY "$root/bench/torch_real_auc.py" --train_dataset "$tmp/V" --valid_dataset "$tmp/V" --test_dataset "$tmp/T" \
        --model "$model" "${MODEL[@]}" "${DCN[@]}" --seed "$seed" --threads 2 2>&1) ||
        { echo "error: torch_real_auc.py --model $model --seed $seed failed:" >&2; echo "$out" | tail -n 5 >&2; exit 1; }
    echo "$out" | sed -n 's/^result model=\([a-z0-9]*\) seed=\([0-9]*\) epoch=\([0-9]*\) valid_auc=\([0-9.]*\) test_auc=\([0-9.]*\) epochs=[0-9]* seconds=\([0-9.]*\)$/pytorch_\1 \2 \3 \4 \5 \6/p' >> "$res"
    tail -n 1 "$res" | awk -v n="$model" '{printf "seed %s: pytorch %-15s epoch %2d of %s: valid auc %s, test auc %s (%.1f s)\n", $2, n, $3, '"$epochs"', $4, $5, $6}'
}

first=1
for s in $seeds; do

    terarec_row dot_adagrad "$s" --optimizer adagrad
    if [ $first = 1 ]; then
        echo "terarec Adagrad: its own defaults: $(tail -n 1 "$res" | awk '{print "initial accumulator " substr($8, 5) ", eps " substr($9, 5)}') (Keras);" \
             "PyTorch Adagrad: initial accumulator 0, eps 1e-10 (torch.optim.Adagrad defaults)"
        first=0
    fi
    if [ $avail_rowwise = 1 ]; then terarec_row dot_rowwise "$s" --optimizer rowwise_adagrad
    else echo "terarec_dot_rowwise $s NA" >> "$res"; echo "seed $s: terarec dot_rowwise: not available in this build (--optimizer has no rowwise_adagrad)"; fi
    if [ $avail_dcn = 1 ]; then terarec_row dcnv2 "$s" --optimizer adagrad --interaction dcnv2 "${DCN[@]}"
    else echo "terarec_dcnv2 $s NA" >> "$res"; echo "seed $s: terarec dcnv2: not available in this build (no --interaction dcnv2 / --dcn_num_layers / --dcn_low_rank_dim)"; fi
    # the same models with torch.optim.Adagrad's settings (accumulator 0, eps 1e-10):
    # the implementation comparison, free of the Keras/PyTorch default difference
    terarec_row dot_adagrad0 "$s" --optimizer adagrad "${ADA0[@]}"
    if [ $avail_dcn = 1 ]; then terarec_row dcnv2_adagrad0 "$s" --optimizer adagrad --interaction dcnv2 "${DCN[@]}" "${ADA0[@]}"
    else echo "terarec_dcnv2_adagrad0 $s NA" >> "$res"; fi
    torch_row dlrm "$s"
    torch_row dcnv2 "$s"
    torch_row logreg "$s"
done

$PY - "$res" "$epochs" <<'PYEOF'
import math, sys
rows = {}
order = ["terarec_dot_adagrad", "terarec_dot_rowwise", "terarec_dcnv2", "terarec_dot_adagrad0",
         "terarec_dcnv2_adagrad0", "pytorch_dlrm", "pytorch_dcnv2", "pytorch_logreg"]
label = {"terarec_dot_adagrad": "terarec dot + Adagrad", "terarec_dot_rowwise": "terarec dot + rowwise Adagrad",
         "terarec_dcnv2": "terarec DCNv2 + Adagrad",
         "terarec_dot_adagrad0": "terarec dot + Adagrad acc 0, eps 1e-10",
         "terarec_dcnv2_adagrad0": "terarec DCNv2 + Adagrad acc 0, eps 1e-10",
         "pytorch_dlrm": "PyTorch DLRM (dot)", "pytorch_dcnv2": "PyTorch DCNv2",
         "pytorch_logreg": "logistic regression (PyTorch)"}
ref = {"terarec_dot_adagrad": "pytorch_dlrm", "terarec_dot_rowwise": "pytorch_dlrm", "terarec_dcnv2": "pytorch_dcnv2",
       "terarec_dot_adagrad0": "pytorch_dlrm", "terarec_dcnv2_adagrad0": "pytorch_dcnv2"}
epochs = int(sys.argv[2])
for line in open(sys.argv[1]):
    f = line.split()
    r = rows.setdefault(f[0], [])
    if f[2] != "NA":
        r.append((int(f[1]), int(f[2]), float(f[4]), float(f[5])))
def stats(k):
    v = [x[2] for x in rows.get(k, [])]
    if not v:
        return None, None
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else float("nan")
    return m, sd
print()
W = (40, 21, 14, 24, 11)
def row(*cells):
    print(" | ".join("%-*s" % (w, c) for w, c in zip(W, cells)).rstrip())
row("model", "mean test AUC (±std)", "chosen epochs", "vs PyTorch (same inter.)", "wall s/seed")
print("-+-".join("-" * w for w in W))
last_epoch = False
for k in order:
    m, sd = stats(k)
    if m is None:
        row(label[k], "not available in this build")
        continue
    eps = ",".join("%d%s" % (x[1], "*" if x[1] == epochs else "") for x in rows[k])
    last_epoch |= any(x[1] == epochs for x in rows[k])
    d = ""
    if k in ref and stats(ref[k])[0] is not None:
        d = "%+.4f" % (m - stats(ref[k])[0])
    secs = sum(x[3] for x in rows[k]) / len(rows[k])
    row(label[k], "%.4f ± %s" % (m, "%.4f" % sd if sd == sd else "n/a"), eps, d, "%.1f" % secs)
print("(std: sample std over seeds; terarec wall time covers its two identical trainings, on V and on T;"
      " seeds: %s)" % " ".join(str(x[0]) for x in rows["pytorch_dlrm"]))
if last_epoch:
    print("* the last epoch was chosen: validation AUC was still rising at %d epochs (raise --epochs)" % epochs)
print()
lr, _ = stats("pytorch_logreg")
for k in order[:5]:
    m, _ = stats(k)
    if m is None:
        continue
    p, _ = stats(ref[k])
    print("%s - %s: %+.4f (goal: within 0.002); vs logistic regression: %+.4f"
          % (label[k], label[ref[k]], m - p, m - lr))
for k in order[5:7]:
    m, _ = stats(k)
    print("%s: vs logistic regression: %+.4f" % (label[k], m - lr))
PYEOF
echo "wall time: $(( $(date +%s) - t_start )) s"
