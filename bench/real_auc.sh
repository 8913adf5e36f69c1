#!/usr/bin/env bash
# real_auc.sh [--seeds "1 2 3"] [--epochs N] [--threshold T]: the real-data accuracy
# check: prepares the Criteo sample (../shared/data, 90% train / 10% test by
# position; never copied into the repository) with `terarec data prepare`, trains
# the same small DLRM with terarec-worker and with PyTorch (bench/torch_real_auc.py)
# for several seeds, and prints each best test AUC, the means, the difference and
# a naive-Bayes frequency baseline. Target: terarec >= PyTorch - 0.002.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seeds="1 2 3"; epochs=6; thr=3
while [ $# -gt 0 ]; do
    case $1 in
    --seeds) seeds=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --threshold) thr=$2; shift 2 ;;
    *) echo "usage: $0 [--seeds \"1 2 3\"] [--epochs N] [--threshold T]" >&2; exit 2 ;;
    esac
done
data=${TR_CRITEO_SAMPLE:-$root/../shared/data/criteo_sample}/kaggle_train_random_0p3pct.tsv
[ -r "$data" ] || { echo "skipped: $data not found"; exit 0; }
[ -x "$root/build/bin/terarec" ] || make -C "$root" -s -j2 >/dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$root/build/bin/terarec" data prepare --output "$tmp/d" --test_fraction 0.1 --frequency_threshold "$thr" \
    --threads 2 "$data" | tail -n 1
MODEL="--batch_size 512 --epochs $epochs --embedding_dim 16 --bottom_mlp_dims 64,16 --top_mlp_dims 64,1
       --learning_rate 1.0 --warmup_steps 50 --decay_start_step 100000"
echo "model: dim 16, bottom 64,16, top 64,1, SGD lr 1.0 (50 warm-up steps), batch 512, $epochs epochs, frequency threshold $thr"
tr=() pt=()
for s in $seeds; do
    a=$("$root/build/bin/terarec-worker" --dataset_type split_binary --dataset_path "$tmp/d" $MODEL --seed "$s" \
        --threads 2 --print_freq 100000 --log_path "" | sed -n 's/^summary: .*best_auc=\([0-9.]*\);.*/\1/p')
    out=$(/usr/bin/python3 "$root/bench/torch_real_auc.py" "$tmp/d" $MODEL --seed "$s" --threads 2)
    b=$(echo "$out" | sed -n 's/^pytorch best test auc \([0-9.]*\).*/\1/p')
    base=$(echo "$out" | sed -n 's/^frequency baseline.*auc \([0-9.]*\)/\1/p')
    echo "seed $s: terarec best auc $a, pytorch best auc $b"
    tr+=("$a"); pt+=("$b")
done
python3 - "$base" "${#tr[@]}" "${tr[@]}" "${pt[@]}" <<'PYEOF'
import sys
base, n = float(sys.argv[1]), int(sys.argv[2])
t = [float(x) for x in sys.argv[3:3 + n]]
p = [float(x) for x in sys.argv[3 + n:3 + 2 * n]]
mt, mp = sum(t) / n, sum(p) / n
print("mean best test auc: terarec %.4f, pytorch %.4f, difference %+.4f (target >= -0.002: %s)" %
      (mt, mp, mt - mp, "met" if mt >= mp - 0.002 else "NOT met"))
print("frequency baseline (naive Bayes over the ids): %.4f; terarec +%.4f, pytorch +%.4f above it" %
      (base, mt - base, mp - base))
PYEOF
