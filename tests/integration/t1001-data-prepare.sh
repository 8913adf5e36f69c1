#!/usr/bin/env bash
# t1001: `terarec data prepare` end to end on generated Criteo-like TSV: output
# bytes equal an independent Python reference (threshold and hash modes, split by
# files and by fraction, both numerical transforms, both hash rules for missing
# values), the threshold vocabulary comes from the training rows only, .gz equals plain, the shuffle is the documented seeded
# permutation and does not depend on --threads or on the memory limit, malformed
# lines are reported as file:line and --strict is fatal, bad usage writes nothing,
# counting that spills gives the same bytes, SIGINT/SIGTERM exit 130 and write
# nothing, and terarec-worker trains on the result.
. "$(dirname "$0")/lib.sh"
T=$TR_BIN/terarec
W=$TR_BIN/terarec-worker
PY=$(command -v python3)
REF="$PY $(cd "$(dirname "$0")" && pwd)/prepare_ref.py"

# gen FILE ROWS SEED: deterministic Criteo-like rows (skewed values, missing fields,
# negative integers, upper-case hex, a few wide integers and 16-digit hex values)
gen() {
    $PY - "$@" <<'PYEOF'
import random, sys
path, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(seed)
out = []
for r in range(n):
    f = [str(rnd.randint(0, 1))]
    for j in range(13):
        u = rnd.random()
        f.append("" if u < 0.15 else str(rnd.randint(-5, 3)) if u < 0.3 else
                 str(rnd.randint(0, 10**12)) if u < 0.32 else str(int(rnd.paretovariate(1.2))))
    for c in range(26):
        u = rnd.random()
        if u < 0.1:
            f.append("")
            continue
        pool = 3 + 37 * c
        v = (int(pool * rnd.random() ** 2) * 2654435761) % (1 << 32)
        s = "%08x" % v
        if c == 5 and u > 0.97:
            s = "%016x" % ((v * 0x100000001) & ((1 << 64) - 1))
        f.append(s.upper() if u > 0.95 else s)
    out.append("\t".join(f))
open(path, "w").write("\n".join(out) + "\n")
PYEOF
}

# cards DIR: the 26 cardinalities of DIR/feature_spec.yaml, comma-separated, cat_0 first
cards() {
    for i in $(seq 0 25); do
        sed -n "s/^  cat_$i\.bin: {cardinality: \([0-9]*\),.*/\1/p" "$1/feature_spec.yaml"
    done | paste -sd, -
}

gen "$TMP/d0.tsv" 3000 1
gen "$TMP/d1.tsv" 1500 2
cd "$TMP" || exit 1

out=$($T data prepare --help 2>&1) && echo "$out" | grep -q -- '--max_ind_range N' && echo "$out" | grep -q 'SPILL' \
    && echo "$out" | grep -q 'exact' && ok "--help documents the modes and the spill" || fail "--help" "$out"

# ---- bytes equal the reference -------------------------------------------------------
for spec in "threshold 3 files 1 --frequency_threshold=3 --test_files=1" \
            "threshold 1 fraction 0.3 --frequency_threshold=1 --test_fraction=0.3" \
            "hash 5000 fraction 0.25 --max_ind_range=5000 --test_fraction=0.25" \
            "hash 70000 files 1 --max_ind_range=70000 --test_files=1" \
            "threshold 3 files 1 --frequency_threshold=3 --test_files=1 --numerical_transform=log1p" \
            "hash 5000 fraction 0.25 --max_ind_range=5000 --test_fraction=0.25 --hash_missing=reserved" \
            "hash 70000 files 1 --max_ind_range=70000 --test_files=1 --hash_missing=reserved --numerical_transform=log1p"; do
    set -- $spec
    name="$1 $2, split by $3 $4${7:+, ${*:7}}"
    rm -rf ref out
    want=$($REF write "${@:7}" "$1" "$2" "$3" "$4" ref d0.tsv d1.tsv)
    if log=$($T data prepare --output out --no_shuffle "$5" "$6" "${@:7}" d0.tsv d1.tsv 2>&1); then
        diff=$(same_dataset ref out)
        [ -z "$diff" ] && [ "$(cards out)" = "$want" ] && echo "$log" | grep -q "cardinalities $want;" \
            && ok "$name: bytes and cardinalities equal the reference" \
            || fail "$name: bytes and cardinalities equal the reference" "$diff; want $want got $(cards out)"
    else
        fail "$name: runs" "$log"
    fi
done
rows=$(grep -c . d0.tsv d1.tsv | awk -F: '{s += $2} END {print s}')
out=$($T data prepare --output o_cnt --max_ind_range 100 --test_fraction 0.25 --no_shuffle d0.tsv d1.tsv 2>&1)
[ "$($REF rows o_cnt)" = "3375 1125" ] && [ "$rows" = 4500 ] && echo "$out" | grep -q '^train: 3375 rows, ' \
    && echo "$out" | grep -q '^test: 1125 rows, ' && ok "fraction split: round(0.25 x 4500) test rows, summary lines" \
    || fail "fraction split" "$($REF rows o_cnt) $out"

# ---- the threshold vocabulary comes from the training rows only ------------------------
# C1 is 0xaaaa in the 3 training rows and 0xbbbb in the 3 test rows: counting the test
# rows too (the seed) would give 0xbbbb an id; here it is rare/missing (0), in both splits.
leak_row() { printf '%s\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\t%s' "$1" "$2"; printf '\t%x' $(seq 1 25); echo; }
for v in 0 1 0; do leak_row $v aaaa; done >leak_tr.tsv
for v in 1 0 1; do leak_row $v bbbb; done >leak_te.tsv
cat leak_tr.tsv leak_te.tsv >leak_all.tsv
for split in "--test_files 1 leak_tr.tsv leak_te.tsv" "--test_fraction 0.5 leak_all.tsv"; do
    rm -rf o_leak
    out=$($T data prepare --output o_leak --no_shuffle --frequency_threshold 2 $split 2>&1)
    [ $? -eq 0 ] && [ "$(od -An -tx1 o_leak/train/cat_0.bin | tr -d ' ')" = 010101 ] \
        && [ "$(od -An -tx1 o_leak/test/cat_0.bin | tr -d ' ')" = 000000 ] && [ "$(cards o_leak | cut -d, -f1)" = 2 ] \
        && grep -q '^metadata: {vocabulary_rows: train}$' o_leak/feature_spec.yaml \
        && ok "vocabulary from train only (${split%% *}): a value only in test gets id 0, metadata says train" \
        || fail "vocabulary from train only (${split%% *})" "$out $(od -An -tx1 o_leak/test/cat_0.bin)"
done
$T data prepare --output o_leak_h --no_shuffle --max_ind_range 100 --test_files 1 leak_tr.tsv leak_te.tsv >/dev/null 2>&1
grep -q '^metadata: {}$' o_leak_h/feature_spec.yaml && ok "hash mode: no vocabulary, metadata stays {}" \
    || fail "hash mode: metadata stays {}" "$(grep metadata o_leak_h/feature_spec.yaml)"

# ---- gzip ----------------------------------------------------------------------------
gzip -c d1.tsv >d1.tsv.gz
$T data prepare --output gz --no_shuffle --frequency_threshold 3 --test_files 1 d0.tsv d1.tsv.gz >/dev/null 2>&1
$T data prepare --output plain --no_shuffle --frequency_threshold 3 --test_files 1 d0.tsv d1.tsv >/dev/null 2>&1
d=$(same_dataset gz plain) && cmp -s gz/feature_spec.yaml plain/feature_spec.yaml && ok ".gz input gives the same bytes as plain" \
    || fail ".gz input gives the same bytes as plain" "$d"
head -c 20000 d1.tsv.gz >trunc.tsv.gz
out=$($T data prepare --output o_gz --test_files 1 d0.tsv trunc.tsv.gz 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(echo "$out" | grep -c ' error: ')" -eq 1 ] && echo "$out" | grep -q "error: .*'trunc.tsv.gz'" \
    && [ ! -e o_gz ] && ! ls -d o_gz.tmp-* >/dev/null 2>&1 \
    && ok "truncated .gz: one error naming the file, exit 2, nothing written" || fail "truncated .gz" "rc=$rc $out"

# ---- shuffle ---------------------------------------------------------------------------
P="--max_ind_range 100000 --test_fraction 0.2"
$T data prepare --output sp $P --no_shuffle d0.tsv d1.tsv >/dev/null 2>&1
$T data prepare --output s1 $P --shuffle_seed 5 --threads 1 d0.tsv d1.tsv >/dev/null 2>&1
$T data prepare --output s1b $P --shuffle_seed 5 --threads 1 d0.tsv d1.tsv >/dev/null 2>&1
$T data prepare --output s2 $P --shuffle_seed 5 --threads 2 --chunk_size 16K d0.tsv d1.tsv >/dev/null 2>&1
out=$($T data prepare --output s3 $P --shuffle_seed 5 --threads 2 --memory_limit 64K d0.tsv d1.tsv 2>&1)
$T data prepare --output s4 $P --shuffle_seed 6 d0.tsv d1.tsv >/dev/null 2>&1
msg=$($REF perm sp s1 5) && ok "shuffled train = unshuffled rows in the documented permutation" \
    || fail "shuffled train = unshuffled rows in the documented permutation" "$msg"
d=$(same_dataset s1 s1b) && ok "same seed twice: identical" || fail "same seed twice: identical" "$d"
d=$(same_dataset s1 s2) && ok "--threads 1 and --threads 2: identical" || fail "--threads 1 and --threads 2: identical" "$d"
d=$(same_dataset s1 s3) && echo "$out" | grep -q 'shuffle went through [0-9]* bucket files' \
    && ok "bucketed shuffle (--memory_limit 64K) identical to in-memory" || fail "bucketed shuffle" "$d $out"
! cmp -s s1/train/numerical.bin s4/train/numerical.bin && cmp -s s1/test/numerical.bin s4/test/numerical.bin \
    && cmp -s sp/test/cat_3.bin s4/test/cat_3.bin && ok "another seed: other train order, same test split" \
    || fail "another seed: other train order, same test split"

# ---- spill -----------------------------------------------------------------------------
$T data prepare --output big_mem --frequency_threshold 2 --test_files 1 d0.tsv d1.tsv >/dev/null 2>&1
out=$($T data prepare --output small_mem --frequency_threshold 2 --test_files 1 --memory_limit 16K --threads 2 \
    --chunk_size 8K d0.tsv d1.tsv 2>&1)
d=$(same_dataset big_mem small_mem) && echo "$out" | grep -q 'counting spilled [0-9]* sorted runs' \
    && ok "threshold counting that spills (--memory_limit 16K): identical output" || fail "spill" "$d $out"

# ---- malformed lines -------------------------------------------------------------------
$PY - d1.tsv bad.tsv <<'PYEOF'
import sys
lines = open(sys.argv[1]).read().split("\n")[:-1]
bad = {2: lines[1] + "\textra", 5: "7" + lines[4][1:], 9: lines[8].replace("\t", "\t1.5", 1),
       14: "\t".join(lines[13].split("\t")[:20] + ["nothex"] + lines[13].split("\t")[21:]),
       20: "0\t1\t2", 33: lines[32].replace("\t", "\t99999999999999999999", 1), 40: "garbage"}
out = []
for i, l in enumerate(lines, 1):
    out.append(bad.get(i, l))
    if i in bad:
        out.append(l)      # the good line follows, so the clean rows are all still there
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PYEOF
out=$($T data prepare --output bad_out --no_shuffle --frequency_threshold 3 --test_files 1 d0.tsv bad.tsv 2>&1); rc=$?
[ $rc -eq 0 ] && d=$(same_dataset plain bad_out) && echo "$out" | grep -q 'bad.tsv:2: expected 40 tab-separated fields, found 41' \
    && echo "$out" | grep -q "bad.tsv:6: label must be 0 or 1, found '7'" \
    && echo "$out" | grep -q "bad.tsv:11: I1: '1.5.*' is not an integer" \
    && echo "$out" | grep -q "bad.tsv:17: C7: 'nothex' is not a hex value" \
    && echo "$out" | grep -q 'bad.tsv:24: expected 40 tab-separated fields, found 3' \
    && [ "$(echo "$out" | grep -c 'line skipped')" -eq 5 ] && echo "$out" | grep -q 'skipped 7 malformed lines' \
    && ok "malformed lines: skipped, first 5 shown as file:line, counted; good rows intact" \
    || fail "malformed lines" "rc=$rc $d $out"
out=$($T data prepare --output strict_out --strict --test_files 1 d0.tsv bad.tsv 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$(echo "$out" | grep -c ' error: ')" -eq 1 ] && echo "$out" | grep -q 'error: bad.tsv:2: ' \
    && [ ! -e strict_out ] && ! ls -d strict_out.tmp-* >/dev/null 2>&1 \
    && ok "--strict: the first malformed line is fatal, exit 2, nothing written" || fail "--strict" "rc=$rc $out"

# ---- bad usage -----------------------------------------------------------------------------
mkdir keep && echo precious >keep/file
# bad_usage NAME REGEX ARGS...: exit 2, one error line matching REGEX, keep/ untouched, no o_bad
bad_usage() {
    local name=$1 re=$2; shift 2
    local out rc
    out=$($T data prepare "$@" 2>&1); rc=$?
    if [ $rc -eq 2 ] && [ "$(echo "$out" | grep -c ' error: ')" -eq 1 ] && echo "$out" | grep -qE "$re" \
        && [ ! -e o_bad ] && [ "$(cat keep/file)" = precious ] && [ "$(ls keep)" = file ] \
        && ! ls -d ./*.tmp-* >/dev/null 2>&1; then
        ok "$name"
    else
        fail "$name" "rc=$rc: $out"
    fi
}
bad_usage "missing input file" "error: cannot open input 'nope.tsv': No such file" --output o_bad --test_files 1 d0.tsv nope.tsv
bad_usage "existing output without --force" "error: --output: directory 'keep' exists and is not empty" \
    --output keep --test_files 1 d0.tsv d1.tsv
bad_usage "unknown flag" "error: unknown option '--frequency'" --output o_bad --frequency 3 --test_files 1 d0.tsv d1.tsv
bad_usage "bad value" "error: --max_ind_range: 'ten' is not an integer" --output o_bad --max_ind_range ten \
    --test_files 1 d0.tsv d1.tsv
bad_usage "no test split" "error: no test split" --output o_bad d0.tsv d1.tsv
bad_usage "fraction out of range" "error: --test_fraction: '1.5' is outside" --output o_bad --test_fraction 1.5 d0.tsv
bad_usage "both modes" "error: --frequency_threshold and --max_ind_range are alternatives" --output o_bad \
    --max_ind_range 10 --frequency_threshold 2 --test_files 1 d0.tsv d1.tsv
bad_usage "no inputs" "error: no input files" --output o_bad --test_fraction 0.1
bad_usage "unknown --numerical_transform" "error: .*--numerical_transform.*'log2'.*nvidia\|log1p" --output o_bad \
    --numerical_transform log2 --test_files 1 d0.tsv d1.tsv
bad_usage "unknown --hash_missing" "error: .*--hash_missing.*'own'.*shared\|reserved" --output o_bad \
    --max_ind_range 10 --hash_missing own --test_files 1 d0.tsv d1.tsv
bad_usage "--hash_missing reserved without hash mode" "error: --hash_missing reserved needs the hash mode" \
    --output o_bad --hash_missing reserved --test_files 1 d0.tsv d1.tsv
bad_usage "--hash_missing reserved with M = 1" "error: --max_ind_range: 1 leaves no id for present values" \
    --output o_bad --max_ind_range 1 --hash_missing reserved --test_files 1 d0.tsv d1.tsv
out=$($T data prepare --output keep --force --max_ind_range 50 --test_files 1 d0.tsv d1.tsv 2>&1)
[ $? -eq 0 ] && [ ! -e keep/file ] && [ -e keep/feature_spec.yaml ] && ok "--force replaces the output" \
    || fail "--force replaces the output" "$out"

# ---- interrupted ------------------------------------------------------------------------------
# SIGINT and SIGTERM stop the run (tr_status_exit_code: TR_ERR_INTERRUPTED -> 130), remove the
# temporary directory and write nothing. The signal goes as soon as OUT.tmp-PID exists (the
# handlers are installed by then; compgen polls without forking); the two passes over ~90 MB of
# text on one thread take far longer than that.
for i in $(seq 1 120); do cat d0.tsv; done >big.tsv
for sig in INT TERM; do
    $T data prepare --output o_int --test_files 1 --threads 1 --chunk_size 64K big.tsv d1.tsv >int.log 2>&1 &
    pid=$!
    end=$((SECONDS + 10))
    until compgen -G 'o_int.tmp-*' >/dev/null || [ $SECONDS -ge $end ]; do :; done
    kill -$sig $pid
    wait $pid; rc=$?
    out=$(cat int.log)
    [ $rc -eq 130 ] && [ "$(echo "$out" | grep -c ' error: ')" -eq 1 ] \
        && echo "$out" | grep -q 'error: data prepare: interrupted; nothing was written' \
        && [ ! -e o_int ] && ! ls -d o_int.tmp-* >/dev/null 2>&1 \
        && ok "SIG$sig: exit 130, one error line, nothing written" || fail "SIG$sig: exit 130, nothing written" "rc=$rc $out"
done
# SIGKILL cannot be caught: the run leaves o_kill.tmp-PID behind. The next run removes it (its
# process is gone) and says so in one line naming it; the folders of a live process (this
# shell) and of a PID above pid_max (which cannot exist) are treated as live and dead.
$T data prepare --output o_kill --test_files 1 --threads 1 --chunk_size 64K big.tsv d1.tsv >kill.log 2>&1 &
pid=$!
end=$((SECONDS + 10))
until compgen -G 'o_kill.tmp-*' >/dev/null || [ $SECONDS -ge $end ]; do :; done
kill -KILL $pid
{ wait $pid; } 2>/dev/null
dead=$(( $(cat /proc/sys/kernel/pid_max) + 1 ))
mkdir -p "o_kill.tmp-$$/train" "o_kill.tmp-$dead.old/x"
if [ -d "o_kill.tmp-$pid" ]; then
    out=$($T data prepare --output o_kill --max_ind_range 50 --test_files 1 d0.tsv d1.tsv 2>&1); rc=$?
    [ $rc -eq 0 ] && [ -e o_kill/feature_spec.yaml ] && [ ! -e "o_kill.tmp-$pid" ] && [ ! -e "o_kill.tmp-$dead.old" ]         && [ -d "o_kill.tmp-$$/train" ]         && [ "$(echo "$out" | grep -c "removed stale staging folder '\./o_kill\.tmp-$pid' of process $pid")" -eq 1 ]         && echo "$out" | grep -q "removed stale staging folder '\./o_kill\.tmp-$dead\.old'"         && ! echo "$out" | grep -q "o_kill.tmp-$$"         && ok "SIGKILL: the next run removes the dead run's staging folder, names it, keeps a live one's"         || fail "SIGKILL: the next run removes the stale staging folder" "rc=$rc $out; left: $(ls -d o_kill.tmp-* 2>&1)"
else
    fail "SIGKILL leaves o_kill.tmp-$pid behind" "$(ls -d o_kill* 2>&1) $(cat kill.log)"
fi
rm -rf o_kill o_kill.tmp-*
rm -f big.tsv

# ---- the worker trains on it -------------------------------------------------------------
out=$($W --dataset_type split_binary --dataset_path s1 --batch_size 64 --max_steps 8 --embedding_dim 8 \
    --bottom_mlp_dims 16,8 --top_mlp_dims 16,1 --learning_rate 0.1 --warmup_steps 0 --print_freq 4 \
    --log_path "" 2>&1); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q '^step=8, ' && echo "$out" | grep -q '^validation: step=8, auc=' \
    && ok "terarec-worker trains 8 steps on the prepared data" || fail "terarec-worker trains" "rc=$rc $out"
done_testing
