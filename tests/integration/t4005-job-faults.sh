#!/usr/bin/env bash
# t4005: a job never hangs and never corrupts memory. Real processes under mpirun:
# - ranks started with different options (MPMD: `-np 1 A : -np 2 B`) stop before
#   allocating, every one with exit 2, rank 0 naming the first differing option;
#   --threads may differ; a check each rank makes alone (rank 0's --log_path) is
#   voted on, and every rank exits 2 without an abort;
# - a fatal error on one rank (a categorical id out of range, in the train split
#   and in the test split) ends the whole job within seconds with that rank's
#   message and exit code;
# - a rank stopped with SIGSTOP: the others wait without burning CPU, and after
#   --collective_timeout the job ends naming the silent rank;
# - a job larger than the memory left to a worker (MemAvailable, a FeatureSpec
#   cardinality of 2^40, ulimit -v) is refused before allocating, naming the
#   total and the largest tables;
# - every allocation that fails (TR_ALLOC_FAIL=k for each k) ends the run with
#   an error naming the bytes asked for, and no crash.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
T=$TR_BIN/terarec
S="$W --batch_size 256 --synthetic_dataset_cardinalities 26x100 --embedding_dim 8 --bottom_mlp_dims 16,8
   --top_mlp_dims 16,1 --max_steps 3 --threads 1 --log_path="
asan=0
ldd "$W" | grep -q libasan && asan=1

# timed OUT_VAR CMD...: runs CMD (stdin /dev/null), sets $rc, $secs and OUT_VAR (stdout+stderr)
timed() {
    local var=$1; shift
    local t0 t1 _o
    t0=$(date +%s.%N)
    _o=$("$@" </dev/null 2>&1)
    rc=$?
    t1=$(date +%s.%N)
    secs=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")
    printf -v "$var" '%s' "$_o"
}
# expect NAME WANT_RC MAX_SECS REGEX: checks the last `timed` run
expect() {
    local name=$1 want=$2 max=$3 re=$4
    if [ "$rc" -ne "$want" ]; then
        fail "$name" "exit $rc (want $want) after $secs s: $(echo "$out" | grep -v '^step=' | tail -n 8)"
    elif ! awk "BEGIN{exit !($secs <= $max)}"; then
        fail "$name" "took $secs s (at most $max)"
    elif ! echo "$out" | grep -qE -- "$re"; then
        fail "$name" "no line matching '$re' in: $(echo "$out" | tail -n 8)"
    else
        ok "$name (exit $rc in $secs s)"
    fi
}

# ---- a world of one: memory refused before allocating --------------------------------------------
timed out $W --batch_size 256 --synthetic_dataset_cardinalities 26x2000000000 --embedding_dim 512 \
    --bottom_mlp_dims 16,512 --top_mlp_dims 16,1 --max_steps 3 --threads 1 --log_path=
expect "104 TB of tables on this machine: refused before allocating" 1 10 \
    'error: memory: rank 0 \(host [^)]*\) needs 96\.86 TiB \(embeddings 96\.86 TiB.*largest: table 0 \(2000000000 x 512, 3\.73 TiB\).* but the node \(MemAvailable\) has .* left'
echo "$out" | grep -q '^.*hint: ' && ok "the memory refusal has a hint" || fail "the memory refusal has a hint" "$out"

if [ "$asan" = 1 ]; then
    skip "ulimit -v: refused naming the limit" "AddressSanitizer reserves terabytes of address space: no ulimit -v"
else
    # needs: 3.10 GiB of tables plus the rest (rank 0 keeps the test logits and sorts them for the AUC)
    timed out bash -c "ulimit -v 1500000; exec $W --batch_size 256 --synthetic_dataset_cardinalities 26x2000000 \
        --embedding_dim 16 --bottom_mlp_dims 16,16 --top_mlp_dims 16,1 --max_steps 3 --threads 1 --log_path="
    expect "ulimit -v 1.5 GB, 3.1 GiB of tables: refused naming the limit" 1 10 \
        'error: memory: rank 0 .* needs 3\.1[0-9] GiB \(embeddings 3\.10 GiB.*its ulimit -v has 1\.[0-9]+ GiB left'
fi

# every allocation failure names its size; none crashes (TR_ALLOC_FAIL=k fails the k-th allocation)
TINY="--batch_size 64 --synthetic_dataset_cardinalities 3x10 --embedding_dim 4 --bottom_mlp_dims 4 --top_mlp_dims 4,1
      --max_steps 2 --threads 1 --synthetic_dataset_valid_batches 1 --log_path=$TMP/oom.json"
bad="" k=1 tried=0
while [ $k -le 2000 ]; do
    out=$(TR_ALLOC_FAIL=$k $W $TINY </dev/null 2>&1)
    rc=$?
    [ $rc -eq 0 ] && break # the k-th allocation is past the end of the run
    tried=$((tried + 1))
    if [ $rc -ne 1 ] || ! echo "$out" | grep -qE 'error: out of (cpu )?memory.*: [0-9]+ bytes|error: out of memory: [0-9]+ bytes' ||
        echo "$out" | grep -qE 'Sanitizer|runtime error|Segmentation|core dumped'; then
        bad="$bad k=$k(exit $rc: $(echo "$out" | grep -E 'error' | head -n 2 | tr '\n' ' '))"
    fi
    k=$((k + 1))
done
if [ $tried -gt 20 ] && [ -z "$bad" ] && [ $rc -eq 0 ]; then
    ok "each of the run's $tried allocations, failed in turn, ends it with exit 1 and 'out of memory: N bytes'"
else
    fail "each allocation failure ends the run naming its size" "tried $tried, last exit $rc;$bad"
fi
# the model's tensors are named too
out=$(TR_ALLOC_FAIL=1 $W $TINY </dev/null 2>&1)
k=1
while [ $k -le 400 ] && ! echo "$out" | grep -q 'allocating embedding table'; do
    k=$((k + 1))
    out=$(TR_ALLOC_FAIL=$k $W $TINY </dev/null 2>&1)
done
echo "$out" | grep -qE 'error: out of cpu memory allocating embedding table [0-9]+ \(10 x 4\): 160 bytes' &&
    ok "a failed table allocation names the table, its shape and bytes" ||
    fail "a failed table allocation names the table" "$(echo "$out" | grep error)"

if ! command -v mpirun >/dev/null 2>&1; then
    skip "multi-process faults" "mpirun not found (install openmpi-bin: make deps)"
    done_testing
fi
use_mpi
M="mpirun --oversubscribe"

# ---- ranks that disagree --------------------------------------------------------------------------
for d in "batch_size|--batch_size 128" "embedding_dim|--embedding_dim 4 --bottom_mlp_dims 16,4" "seed|--seed 7" \
    "learning_rate|--learning_rate 0.5" "max_steps|--max_steps 4"; do
    name=${d%%|*} extra=${d#*|}
    timed out $M -np 1 $S : -np 2 $S $extra
    expect "rank 1 and 2 started with $extra: every rank exits 2 naming --$name" 2 30 \
        "error: the ranks disagree on the training config: --$name is '[^']*' on rank 0 but '[^']*' on rank 1 \(2 ranks differ\)"
done
timed out $M -np 1 $S : -np 1 $S --threads 2
expect "--threads may differ between ranks" 0 60 '^summary: steps=3'

# a check each rank makes on its own (rank 0 probes --log_path, its one writer): the
# verdict is shared, and every rank exits 2 without an abort
touch "$TMP/afile"
timed out $M -np 3 $S --log_path "$TMP/afile/log.json"
expect "--log_path under a file, seen by rank 0 only: every rank exits 2 naming the file" 2 30 \
    "error: --log_path: .*afile"
echo "$out" | grep -q 'MPI_ABORT' && fail "a shared verdict needs no MPI_Abort" "$out" ||
    ok "a shared verdict needs no MPI_Abort"

# ---- one rank's fatal error ends the job -----------------------------------------------------------
python3 - "$TMP" <<'PYEOF'
import random, sys
rnd = random.Random(1)
for name, n in (("d0.tsv", 2000), ("d1.tsv", 600)):
    rows = []
    for r in range(n):
        f = [str(rnd.randint(0, 1))] + [str(rnd.randint(0, 50)) for _ in range(13)]
        f += ["%08x" % rnd.randint(0, 20 + c) for c in range(26)]
        rows.append("\t".join(f))
    open(sys.argv[1] + "/" + name, "w").write("\n".join(rows) + "\n")
PYEOF
(cd "$TMP" && $T data prepare --output ds --test_files 1 --no_shuffle d0.tsv d1.tsv >/dev/null 2>&1) ||
    fail "prepare a dataset"
D="--dataset_type split_binary --batch_size 256 --embedding_dim 8 --bottom_mlp_dims 16,8 --top_mlp_dims 16,1
   --max_steps 6 --threads 1 --log_path= --collective_timeout 60"
for split in train test; do
    rm -rf "$TMP/bad" && cp -r "$TMP/ds" "$TMP/bad"
    # cat_5 holds int8 ids below its ~27 rows: 127 at sample 300 of the split
    printf '\x7f' | dd of="$TMP/bad/$split/cat_5.bin" bs=1 seek=300 conv=notrunc 2>/dev/null
    timed out $M -np 3 $W $D --dataset_path "$TMP/bad"
    expect "an id out of range in the $split split on one of 3 ranks: the job ends with its message" 2 30 \
        'error: table 5: categorical id 127 of sample [0-9]+ \(batch [0-9]+\) is outside \[0, [0-9]+\)'
    echo "$out" | grep -qE 'error: rank [0-9] of 3 failed \(out of range\): ending the job on every rank \(exit code 2\)' &&
        ok "$split split: the failing rank says it ends the job, with its exit code" ||
        fail "$split split: the failing rank says it ends the job" "$(echo "$out" | tail -n 5)"
done

# ---- a stopped rank ---------------------------------------------------------------------------------
TO=6
$M -np 3 $W --batch_size 256 --synthetic_dataset_cardinalities 26x100 --embedding_dim 8 --bottom_mlp_dims 16,8 \
    --top_mlp_dims 16,1 --max_steps 1000000 --threads 1 --log_path= --collective_timeout $TO \
    </dev/null >"$TMP/stop.out" 2>&1 &
job=$!
victim="" others=""
for _ in $(seq 100); do # up to 10 s for the three ranks to start training
    sleep 0.1
    grep -q '^model: ' "$TMP/stop.out" || continue
    for p in $(own_pids "^$W --batch_size 256 .*--collective_timeout $TO"); do
        r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
        if [ "$r" = 1 ]; then victim=$p; else others="$others $p"; fi
    done
    break
done
cpu() { awk '{s += $14 + $15} END {print s}' $(for p in "$@"; do echo "/proc/$p/stat"; done) 2>/dev/null; }
if [ -z "$victim" ]; then
    fail "SIGSTOP on rank 1" "could not find the ranks: $(tail -n 5 "$TMP/stop.out")"
    kill $job 2>/dev/null
else
    sleep 0.5
    kill -STOP "$victim"
    t0=$(date +%s.%N)
    sleep 1
    c0=$(cpu $others)
    sleep 2
    c1=$(cpu $others)
    wait $job
    rc=$?
    secs=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}")
    out=$(cat "$TMP/stop.out")
    tick=$(getconf CLK_TCK)
    # two waiting ranks over 2 s: a busy wait would use 2 x 2 s of CPU
    used=$(awk "BEGIN{printf \"%.2f\", ($c1 - $c0) / $tick}")
    awk "BEGIN{exit !($used < 0.6)}" && ok "the 2 ranks waiting on a stopped rank used $used s of CPU in 2 s" ||
        fail "waiting does not burn CPU" "the 2 waiting ranks used $used CPU seconds in 2 s"
    [ $rc -ne 0 ] && awk "BEGIN{exit !($secs <= $TO + 15)}" &&
        echo "$out" | grep -qE "error: MPI_I[a-z]+: no progress for [0-9.]+ s \(--collective_timeout $TO\); silent rank\(s\): 1 \(" &&
        ok "SIGSTOP on rank 1: the job ends $secs s later (timeout $TO s) naming rank 1 as silent (exit $rc)" ||
        fail "SIGSTOP on rank 1: the job ends naming it" "exit $rc after $secs s: $(grep -E 'error|hint' "$TMP/stop.out" | head -n 6)"
    for _ in $(seq 50); do # mpirun sends SIGTERM, then SIGKILL after a second
        kill -0 "$victim" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$victim" 2>/dev/null; then
        fail "no rank is left behind" "pid $victim still exists 5 s after the job ended"
        kill -KILL "$victim" 2>/dev/null
    else
        ok "no rank is left behind (the stopped one is killed too)"
    fi
fi

# ---- memory on several ranks: refused together --------------------------------------------------
timed out $M -np 2 $W --batch_size 256 --synthetic_dataset_cardinalities 26x2000000000 --embedding_dim 512 \
    --bottom_mlp_dims 16,512 --top_mlp_dims 16,1 --max_steps 3 --threads 1 --log_path=
expect "2 ranks, 104 TB of tables: refused before allocating, the node's ranks summed" 1 30 \
    "error: memory: rank 0 \(host [^)]*\) needs [0-9.]+ TiB for its node's 2 ranks together"

# a FeatureSpec cardinality of 2^40 (past the command line's 2^31 cap) is refused the same way
rm -rf "$TMP/big" && cp -r "$TMP/ds" "$TMP/big"
sed -i 's/^\(  cat_0\.bin: {cardinality: \)[0-9]*/\11099511627776/' "$TMP/big/feature_spec.yaml"
timed out $W $D --dataset_path "$TMP/big"
expect "a FeatureSpec table of 2^40 rows: refused before allocating" 1 10 \
    'error: memory: rank 0 .*largest: table 0 \(1099511627776 x 8, 32\.00 TiB\)'

done_testing
