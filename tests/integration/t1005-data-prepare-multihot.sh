#!/usr/bin/env bash
# t1005: terarec data prepare --multi_hot_sizes materializes multi-hot Criteo as
# MLPerf's DLRM-DCNv2 reference does: checked byte for byte against a numpy
# reference written from the reference's rule (multihot_ref.py: RandomState(0),
# np.random.randint per table) in threshold and hash mode, shuffled or not, and
# with another seed; the reference with the wrong seed fails the check. Multi-hot
# TSV: columns of lists (--list_columns) become features of variable hotness, each
# row's ids and length checked against the text in hash and threshold mode. The
# worker trains on both; bad flags are refused (exit 2, the flag named) before
# anything is written.
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
W=$TR_BIN/terarec-worker
PY=$(command -v python3)
cd "$TMP" || exit 1
# numpy for the reference (Debian's python3-numpy: make deps)
NP=""
for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' 2>/dev/null; then NP=$p; break; fi
done
MLPERF=3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1
REF="$TR_ROOT/tests/integration/multihot_ref.py"
partial_batch_dataset # data.tsv, and ds/: one-hot, threshold mode, file order

# refmatch NAME ONEHOT MULTIHOT SIZES [SEED]
refmatch() {
    local out
    if [ -z "$NP" ]; then
        skip "$1: numpy reference" "no python3 with numpy (python3-numpy: make deps)"
    elif out=$($NP "$REF" "$2" "$3" "$4" ${5:-} 2>&1); then
        ok "$1: $out"
    else
        fail "$1: matches MLPerf's rule" "$out"
    fi
}

if $T data prepare --output mh --test_fraction 0.1 --no_shuffle --multi_hot_sizes $MLPERF data.tsv >mh.log 2>&1; then
    ok "prepare --multi_hot_sizes (MLPerf's sizes): $(grep -o 'multi-hot: [0-9]* bytes' mh.log)"
else
    fail "prepare --multi_hot_sizes" "$(tail -n 4 mh.log)"
fi
refmatch "threshold mode, file order" ds mh $MLPERF
# hash mode (1000 rows a table), shuffled: the one-hot twin shuffled the same way
if $T data prepare --output h1 --max_ind_range 1000 --test_fraction 0.2 --shuffle_seed 9 data.tsv >h1.log 2>&1 &&
    $T data prepare --output h3 --max_ind_range 1000 --test_fraction 0.2 --shuffle_seed 9 --multi_hot_sizes $MLPERF \
        data.tsv >h3.log 2>&1; then
    ok "hash mode, shuffled: prepared one-hot and multi-hot"
else
    fail "hash mode, shuffled" "$(tail -n 3 h1.log h3.log)"
fi
refmatch "hash mode, shuffled" h1 h3 $MLPERF
SIZES=4,1,2,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,3
if $T data prepare --output s7 --max_ind_range 1000 --test_fraction 0.2 --shuffle_seed 9 --multi_hot_sizes $SIZES \
    --multi_hot_seed 7 data.tsv >s7.log 2>&1; then
    refmatch "--multi_hot_seed 7" h1 s7 $SIZES 7
    if [ -n "$NP" ] && ! $NP "$REF" h1 s7 $SIZES 0 >/dev/null 2>&1; then
        ok "the reference with seed 0 tells a dataset of seed 7 apart"
    elif [ -n "$NP" ]; then
        fail "the reference with seed 0 tells a dataset of seed 7 apart"
    fi
else
    fail "--multi_hot_seed 7" "$(tail -n 3 s7.log)"
fi
# the worker reads it: fixed hotness from the spec (averaged bags: a sum of 100 rows of a tiny
# table diverges on this toy data)
if out=$(timeout 120 $W --dataset_path mh --batch_size 128 --embedding_dim 8 --bottom_mlp_dims 16,8 \
    --top_mlp_dims 16,1 --max_steps 6 --print_freq 3 --learning_rate 0.05 --warmup_steps 0 --pooling mean --log_path '' --interaction dcnv2 --dcn_num_layers 1 \
    --dcn_low_rank_dim 4 2>&1) && echo "$out" | grep -q 'step=6,'; then
    ok "the worker trains on the multi-hot dataset ($(echo "$out" | grep -o 'loss=[0-9.]*' | tail -n 1))"
else
    fail "the worker trains on the multi-hot dataset" "$(echo "$out" | tail -n 3)"
fi

# ---- multi-hot TSV: columns of lists (C4 and C21: 0 to 6 hex values, ',' between
# them); C1 holds the line number, so each output row names its input line
$PY - lists.tsv <<'PYEOF'
import random, sys
rnd = random.Random(11)
rows = []
for r in range(400):
    f = [str(rnd.randint(0, 1))] + [str(rnd.randint(0, 50)) for _ in range(13)]
    cats = ["%x" % (r + 1)] + ["%08x" % rnd.randint(0, 30 + 7 * c) for c in range(1, 26)]
    for c in (3, 20):
        cats[c] = ",".join("%x" % rnd.randint(0, 25 + 10 * c) for _ in range(rnd.randint(0, 6)))
    rows.append("\t".join(f + cats))
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PYEOF
# listcheck DIR MODE: every row of both splits against lists.tsv (hash: shuffled, rows
# found by C1; threshold: file order), stdlib only: the
# list columns' ids (hash: value % M; threshold 2: ids 1..K by the training rows'
# counts of every list value, descending, ties by value) and per-sample lengths
listcheck() {
    $PY - lists.tsv "$1" "$2" <<'PYEOF'
import collections, os, struct, sys
tsv, d, mode = sys.argv[1], sys.argv[2], sys.argv[3]
lines = [l.rstrip("\n").split("\t") for l in open(tsv)]
spec = open(os.path.join(d, "feature_spec.yaml")).read()
def col(split, name, fmt):
    b = open(os.path.join(d, split, name), "rb").read()
    return list(struct.unpack("<%d%s" % (len(b) // struct.calcsize(fmt), fmt), b))
width = {"int8": "b", "int16": "h", "int32": "i"}
if mode == "hash":  # shuffled: C1 (its line number) says where each row came from
    src = {s: [v - 1 for v in col(s, "cat_0.bin", "i")] for s in ("train", "test")}
else:  # file order, the last 20% the test split
    n_test = round(0.2 * len(lines))
    src = {"train": list(range(len(lines) - n_test)), "test": list(range(len(lines) - n_test, len(lines)))}
for c in (3, 20):
    vals = lambda line: [int(x, 16) for x in lines[line][14 + c].split(",") if x]
    if mode == "hash":
        ident = lambda v: v % 2147483647
    else:
        cnt = collections.Counter(v for line in src["train"] for v in vals(line))
        kept = sorted((v for v in cnt if cnt[v] >= 2), key=lambda v: (-cnt[v], v))
        ids = {v: i + 1 for i, v in enumerate(kept)}
        ident = lambda v: ids.get(v, 0)
    dt = [l for l in spec.splitlines() if l.strip().startswith("cat_%d.bin:" % c)][0]
    assert "hotness: variable" in dt and "lengths_dtype: uint8" in dt, dt
    most = 0
    for s in ("train", "test"):
        ids_t = col(s, "cat_%d.bin" % c, width[dt.split("dtype: ")[1].split(",")[0]])
        lens = col(s, "cat_%d_lengths.bin" % c, "B")
        assert len(lens) == len(src[s]) and sum(lens) == len(ids_t), (s, c, len(lens), len(src[s]), sum(lens))
        at = 0
        for k, line in enumerate(src[s]):
            want = [ident(v) for v in vals(line)]
            got = ids_t[at:at + lens[k]]
            assert got == want, "%s cat_%d row %d (line %d): %s, expected %s" % (s, c, k, line + 1, got, want)
            at += lens[k]
            most = max(most, lens[k])
    assert "max_hotness: %d" % most in dt, (dt, most)
print("ok: lists of C4 and C21 in %d + %d rows, %s mode" % (len(src["train"]), len(src["test"]), mode))
PYEOF
}
if $T data prepare --output lh --list_columns 3,20 --max_ind_range 2147483647 --test_fraction 0.2 --shuffle_seed 3 \
    lists.tsv >lh.log 2>&1 && out=$(listcheck lh hash 2>&1); then
    ok "--list_columns, hash mode, shuffled: $out"
else
    fail "--list_columns, hash mode, shuffled" "$(tail -n 3 lh.log; echo "${out:-}" | tail -n 3)"
fi
if $T data prepare --output lt --list_columns 3,20 --frequency_threshold 2 --test_fraction 0.2 --no_shuffle \
    lists.tsv >lt.log 2>&1 && out=$(listcheck lt threshold 2>&1); then
    ok "--list_columns, threshold mode (every list value counted): $out"
else
    fail "--list_columns, threshold mode" "$(tail -n 3 lt.log; echo "${out:-}" | tail -n 3)"
fi
if out=$(timeout 120 $W --dataset_path lt --batch_size 64 --embedding_dim 8 --bottom_mlp_dims 16,8 \
    --top_mlp_dims 16,1 --max_steps 4 --print_freq 2 --learning_rate 0.05 --warmup_steps 0 --pooling mean \
    --log_path '' 2>&1) && echo "$out" | grep -q 'step=4,'; then
    ok "the worker trains on the variable-hotness dataset"
else
    fail "the worker trains on the variable-hotness dataset" "$(echo "$out" | tail -n 3)"
fi
# a list longer than --max_hotness is a malformed line: skipped and counted, or with --strict fatal
out=$($T data prepare --output lm --list_columns 3,20 --max_hotness 5 --max_ind_range 1000 --test_fraction 0.2 \
    lists.tsv 2>&1)
if echo "$out" | grep -q "C4: .* holds more than --max_hotness 5 values (line skipped)\|C21: .* holds more than --max_hotness 5 values (line skipped)" &&
    echo "$out" | grep -q 'skipped [0-9]* malformed line'; then
    ok "a list over --max_hotness: the line is skipped and counted"
else
    fail "a list over --max_hotness" "$(echo "$out" | tail -n 3)"
fi

# bad flags: exit 2, the flag named, nothing written
bad() { # NAME MESSAGE ARGS...
    local name=$1 msg=$2; shift 2
    local out rc
    out=$($T data prepare --output badout --test_fraction 0.1 "$@" data.tsv 2>&1)
    rc=$?
    if [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$msg" && [ ! -e badout ]; then
        ok "$name: exit 2, '$msg'"
    else
        fail "$name" "rc=$rc $(echo "$out" | tail -n 2)"
    fi
}
bad "three sizes" "--multi_hot_sizes: 3 sizes; Criteo has 26" --multi_hot_sizes 3,2,1
bad "a size of 0" "multi_hot_sizes" --multi_hot_sizes 0,2
bad "a seed without sizes" "--multi_hot_seed needs --multi_hot_sizes" --multi_hot_seed 3
bad "pareto" "multi_hot_distribution" --multi_hot_sizes $MLPERF --multi_hot_distribution pareto
bad "a lookup over --memory_limit" "the lookup of cat_20 (1000 rows x 99 ids)" --max_ind_range 1000 \
    --multi_hot_sizes $MLPERF --memory_limit 300K
bad "--max_hotness without --list_columns" "--max_hotness needs --list_columns" --max_hotness 9
bad "a tab as --list_separator" "--list_separator" --list_columns 3 --list_separator "$(printf '\t')"
bad "a list column materialized" "cat_20 is a list column" --list_columns 20 --multi_hot_sizes $MLPERF
out=$($T data prepare --output ls --list_columns 3,20 --max_hotness 5 --strict --max_ind_range 1000 \
    --test_fraction 0.2 lists.tsv 2>&1)
rc=$?
if [ $rc -eq 2 ] && echo "$out" | grep -q 'lists.tsv:[0-9]*: C[0-9]*: .* holds more than --max_hotness 5' && [ ! -e ls ]; then
    ok "--strict: a list over --max_hotness stops the run naming the line and the column (exit 2)"
else
    fail "--strict with a list over --max_hotness" "rc=$rc $(echo "$out" | tail -n 2)"
fi
done_testing
