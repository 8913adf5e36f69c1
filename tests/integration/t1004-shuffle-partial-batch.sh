#!/usr/bin/env bash
# t1004: the order of training samples and the last partial batch. On a prepared
# dataset whose training split is not a whole number of batches: the partial
# batch is trained (ceil(N/B) steps an epoch) unless --drop_last (floor(N/B)), and
# the console says which. With --learning_rate 0 the weights never change, so the
# sum over an epoch of loss x batch size is the loss of every training sample once:
# --shuffle_samples must give the same sum as the file order (every sample once,
# no sample twice) while the per-step losses differ, and its epochs must differ
# from each other; the same seed gives the same order; --shuffle_batches serves
# the same batches in another order; --start_position (EPOCH:BATCH or a step)
# trains what an uninterrupted run trains from there; N = 3 workers see the same
# batches as one (losses within 1e-5, the last batch smaller than the world).
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
W=$TR_BIN/terarec-worker
PY=$(command -v python3)
cd "$TMP" || exit 1
partial_batch_dataset
# B leaves a last batch of 2 samples (fewer than the 3 workers below)
NB=$(( (N + B - 1) / B ))
echo "# $N training samples, batch $B: $NB batches, the last of 2"
MODEL="--dataset_type split_binary --dataset_path ds --batch_size $B --embedding_dim 4 --bottom_mlp_dims 8,4
       --top_mlp_dims 8,1 --warmup_steps 0 --print_freq 1 --evals_per_epoch 0 --threads 1"

# steps LOG: "step loss" per training step of a DLLogger log, full precision
steps() {
    $PY -c 'import json,sys
for l in open(sys.argv[1]):
    if not l.startswith("DLLL "): continue
    r = json.loads(l[5:])
    if isinstance(r["step"], int) and "loss" in r["data"]: print(r["step"], repr(r["data"]["loss"]))' "$1"
}

out=$($W $MODEL --epochs 2 --learning_rate 0.1 --log_path a.json 2>&1)
n=$(echo "$out" | sed -n 's/^summary: steps=\([0-9]*\),.*/\1/p')
[ "$n" = $((2 * NB)) ] && ok "the last partial batch is trained: $n steps in 2 epochs" \
    || fail "the last partial batch is trained" "steps '$n', want $((2 * NB)); $(echo "$out" | tail -n 3)"
echo "$out" | grep -q "($NB batches of $B, the last of 2)" && ok "the console names the partial batch" \
    || fail "the console names the partial batch" "$(echo "$out" | grep '^data:')"
out=$($W $MODEL --epochs 2 --learning_rate 0.1 --drop_last --log_path d.json 2>&1)
n=$(echo "$out" | sed -n 's/^summary: steps=\([0-9]*\),.*/\1/p')
[ "$n" = $((2 * (N / B))) ] && ok "--drop_last drops it: $n steps in 2 epochs" \
    || fail "--drop_last drops it" "steps '$n', want $((2 * (N / B)))"
echo "$out" | grep -q "the last 2 dropped (--drop_last)" && ok "the console says what --drop_last dropped" \
    || fail "the console says what --drop_last dropped" "$(echo "$out" | grep '^data:')"

# learning rate 0: per-epoch sums of loss x batch size
for v in plain:"" shuf:--shuffle_samples shuf2:--shuffle_samples; do
    name=${v%%:*} flag=${v#*:}
    $W $MODEL --epochs 2 --learning_rate 0 --seed 5 $flag --log_path "$name.json" >"$name.out" 2>&1 \
        || fail "lr 0 run $name" "$(tail -n 3 "$name.out")"
    steps "$name.json" >"$name.steps"
done
res=$($PY - plain.steps shuf.steps "$NB" "$B" "$N" <<'PYEOF'
import sys
def load(p): return [float(l.split()[1]) for l in open(p)]
a, s, nb, b, n = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
sizes = [b] * (nb - 1) + [n - b * (nb - 1)]
def epoch_sum(x, e): return sum(v * m for v, m in zip(x[e * nb:(e + 1) * nb], sizes))
print(len(a), len(s), "%.9g %.9g %.9g %.9g" % (epoch_sum(a, 0), epoch_sum(s, 0), epoch_sum(a, 1), epoch_sum(s, 1)),
      int(a[:nb] == a[nb:]), int(s[:nb] == s[nb:]), sum(x != y for x, y in zip(a[:nb], s[:nb])))
PYEOF
)
read -r la ls pa0 ps0 pa1 ps1 plain_rep shuf_rep ndiff <<<"$res"
echo "# lr 0: epoch sums plain $pa0 $pa1, shuffled $ps0 $ps1; $ndiff of $NB step losses differ"
[ "$la" = $((2 * NB)) ] && [ "$ls" = $((2 * NB)) ] && ok "lr 0 runs logged every step" \
    || fail "lr 0 runs logged every step" "$la $ls"
$PY -c "import sys; a,b,c,d=$pa0,$ps0,$pa1,$ps1; sys.exit(0 if abs(a-b)<=1e-5*abs(a) and abs(c-d)<=1e-5*abs(c) else 1)" \
    && ok "--shuffle_samples serves every training sample once an epoch (loss sums equal)" \
    || fail "--shuffle_samples serves every training sample once an epoch" "$res"
[ "$ndiff" -ge $((NB - 1)) ] && ok "--shuffle_samples changes the batches ($ndiff of $NB differ)" \
    || fail "--shuffle_samples changes the batches" "$res"
[ "$plain_rep" = 1 ] && [ "$shuf_rep" = 0 ] && ok "file order repeats each epoch; shuffled epochs differ" \
    || fail "file order repeats each epoch; shuffled epochs differ" "$res"
cmp -s shuf.steps shuf2.steps && ok "the same seed gives the same order" \
    || fail "the same seed gives the same order" "$(diff shuf.steps shuf2.steps | head -n 4)"
$W $MODEL --epochs 1 --learning_rate 0 --seed 6 --shuffle_samples --log_path s6.json >/dev/null 2>&1
steps s6.json >s6.steps
$PY - shuf.steps s6.steps "$NB" <<'PYEOF' && ok "another seed gives another order" || fail "another seed gives another order"
import sys
a = [l.split()[1] for l in open(sys.argv[1])][:int(sys.argv[3])]
b = [l.split()[1] for l in open(sys.argv[2])]
sys.exit(0 if len(b) == len(a) and sum(x != y for x, y in zip(a, b)) >= len(a) - 1 else 1)
PYEOF

# --shuffle_batches: the file-order batches in another order (the same loss sum at lr 0)
$W $MODEL --epochs 2 --learning_rate 0 --seed 5 --shuffle_batches --log_path sb.json >sb.out 2>&1 \
    || fail "lr 0 run with --shuffle_batches" "$(tail -n 3 sb.out)"
steps sb.json >sb.steps
$PY - plain.steps sb.steps "$NB" "$B" "$N" <<'PYEOF' && ok "--shuffle_batches reorders whole batches" \
    || fail "--shuffle_batches reorders whole batches" "$(paste plain.steps sb.steps | head -n 5)"
import sys
def load(p): return [float(l.split()[1]) for l in open(p)]
a, s, nb = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
# at lr 0 a batch's loss identifies it: each epoch serves the same multiset of batches
ok = len(s) == 2 * nb and all(sorted(a[e * nb:(e + 1) * nb]) == sorted(s[e * nb:(e + 1) * nb]) for e in (0, 1))
sys.exit(0 if ok and s[:nb] != a[:nb] and s[:nb] != s[nb:] else 1)
PYEOF

# --start_position: a run started at step k (as EPOCH:BATCH or as k) trains the
# batches an uninterrupted run trains from step k (lr 0: bitwise the same losses)
K=$((NB + 3))
for pos in "1:3" "$K"; do
    $W $MODEL --max_steps 5 --learning_rate 0 --seed 5 --shuffle_samples --start_position "$pos" \
        --log_path "sp.json" >sp.out 2>&1 || fail "--start_position $pos runs" "$(tail -n 3 sp.out)"
    steps sp.json | awk '{print $2}' >sp.steps
    awk -v k="$K" 'NR > k && NR <= k + 5 {print $2}' shuf.steps >want.steps
    if [ -s sp.steps ] && cmp -s sp.steps want.steps && grep -q "training starts at epoch 1, batch 3" sp.out; then
        ok "--start_position $pos resumes the uninterrupted run's batches at step $K"
    else
        fail "--start_position $pos resumes the uninterrupted run's batches" "$(paste sp.steps want.steps | head -n 5)"
    fi
done

if command -v mpirun >/dev/null 2>&1; then
    use_mpi
    $W $MODEL --epochs 2 --learning_rate 0.5 --seed 3 --shuffle_samples --log_path one.json >/dev/null 2>&1
    out=$(mpirun -np 3 $W $MODEL --epochs 2 --learning_rate 0.5 --seed 3 --shuffle_samples --columnwise_split \
          --data_parallel_bottom_mlp --log_path three.json 2>&1) || fail "3 workers run" "$(echo "$out" | tail -n 5)"
    steps one.json >one.steps
    steps three.json >three.steps
    $PY - one.steps three.steps <<'PYEOF' && ok "3 workers train the same shuffled batches as one" \
        || fail "3 workers train the same shuffled batches as one" "$(paste one.steps three.steps | head -n 5)"
import sys
a = [float(l.split()[1]) for l in open(sys.argv[1])]
b = [float(l.split()[1]) for l in open(sys.argv[2])]
sys.exit(0 if a and len(a) == len(b) and all(abs(x - y) <= 1e-5 * max(abs(x), 1e-3) for x, y in zip(a, b)) else 1)
PYEOF
else
    skip "3 workers train the same shuffled batches as one" "mpirun not found (install openmpi-bin: make deps)"
fi
done_testing
