#!/usr/bin/env bash
# t2011: a table store that cannot work is a one-line error (with a hint) before
# the first step: a bad --table_store or --embedding_cache (exit 2), a missing
# directory, a file, a read-only file system, a disk too small for the files
# (a 1 MiB tmpfs the test mounts: the plan's refusal on every rank at once, 3
# workers), a cache below two batches of ids (exit 1); nothing trains and nothing
# is left in the directory. `terarec plan` counts the caches, the host memory and
# the files: --fit puts the seed's 1.68 TB model on 1 node x 8 GPUs of 80 GB with
# 2 TB of host memory (--table_store host, a cache it picks that fits both), picks
# a file store on the cpu when the tables exceed --memory_per_worker, and refuses
# a disk too small (--disk_per_node).
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
T=$TR_BIN/terarec
BASE="--batch_size 250 --synthetic_dataset_cardinalities 30,7,50,7,1000,3,2000,90,5,64000 --embedding_dim 8
      --bottom_mlp_dims 16,8 --top_mlp_dims 16,1 --max_steps 3 --synthetic_dataset_train_batches 10
      --synthetic_dataset_valid_batches 0"
# refused NAME RC PATTERN ARGS...: the worker exits RC with PATTERN in an error line, a
# hint, and no step trained
refused() {
    local name=$1 want=$2 pat=$3 out rc
    shift 3
    out=$($W $BASE --log_path "" "$@" 2>&1)
    rc=$?
    if [ "$rc" -eq "$want" ] && echo "$out" | grep -q "error: .*$pat" && echo "$out" | grep -q "hint: " &&
        ! echo "$out" | grep -q "^step="; then
        ok "$name"
    else
        fail "$name" "rc=$rc: $(echo "$out" | tail -n 4)"
    fi
}
refused "a bad --table_store" 2 "--table_store 'disk': expected memory, host or file:DIR" --table_store disk
refused "--embedding_cache without a table store" 2 "--embedding_cache is given but the table store is memory" \
    --embedding_cache 1G
refused "a bad --embedding_cache" 2 "--embedding_cache 'half': expected a size" --table_store host \
    --embedding_cache half
refused "a cache below two batches of ids" 1 "--embedding_cache 1.00 KiB: this worker's tables need at least" \
    --table_store host --embedding_cache 1K
refused "a missing directory" 1 "--table_store file:$TMP/none: No such file or directory" \
    --table_store "file:$TMP/none"
touch "$TMP/afile"
refused "a file, not a directory" 1 "--table_store file:$TMP/afile: Not a directory" --table_store "file:$TMP/afile"

MNT=$TMP/mnt
mkdir -p "$MNT"
if mount -t tmpfs -o size=1m tmpfs "$MNT" 2>/dev/null; then
    # 64000 rows of 8 floats (2 MiB) do not fit 1 MiB
    refused "a disk too small for the files" 1 "disk: rank 0 (host .*) needs 2.05 MiB for its table files under" \
        --table_store "file:$MNT" --embedding_cache 0.01
    if command -v mpirun >/dev/null 2>&1; then
        use_mpi
        out=$(timeout 120 mpirun -np 3 $W $BASE --log_path "" --table_store "file:$MNT" --embedding_cache 0.01 \
              --columnwise_split --data_parallel_bottom_mlp 2>&1)
        rc=$?
        # rank 0's verdict for the node's 3 ranks together, shared: the ranks stop on it
        # with no MPI_Abort (mpirun ends the others once the first exits, so not every
        # rank may get to say so) and nothing trains
        if [ $rc -ne 0 ] && echo "$out" | grep -q "error: disk: the 3 ranks of that node need 2.05 MiB" &&
            echo "$out" | grep -q 'error: training failed: input/output error' &&
            ! echo "$out" | grep -q "MPI_ABORT" && ! echo "$out" | grep -q "^step="; then
            ok "3 workers stop together on the disk's verdict"
        else
            fail "3 workers stop together on the disk's verdict" "rc=$rc: $(echo "$out" | head -n 8)"
        fi
    else
        skip "3 workers stop together on the disk's verdict" "mpirun not found"
    fi
    mount -o remount,ro "$MNT"
    refused "a read-only file system" 1 "--table_store file:$MNT: cannot create files there: Read-only file system" \
        --table_store "file:$MNT"
    [ -z "$(ls -A "$MNT")" ] && ok "nothing left in the directory" || fail "nothing left in the directory"
    umount "$MNT"
else
    skip "a disk too small, a read-only file system" "cannot mount a tmpfs here (not root)"
fi

# the plan: the seed's 1.68 TB model (Criteo TB, no frequency limit, dim 512) on 1 node
SEED="--preset criteo_tb_t0 --embedding_dim 512 --bottom_mlp_dims 512,256,512 --columnwise_split
      --data_parallel_bottom_mlp --nodes 1 --gpus_per_node 8 --backend cuda --memory_per_worker 80G"
out=$($T plan $SEED 2>&1)
rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "error: worker 0 needs .* of GPU memory, over --memory_per_worker 80.00 GiB" &&
    ok "plan: the 1.68 TB model does not fit 8 GPUs of 80 GB in memory" ||
    fail "plan: the 1.68 TB model does not fit 8 GPUs of 80 GB in memory" "rc=$rc $(echo "$out" | tail -n 3)"
if out=$($T plan $SEED --host_memory_per_node 2T --table_store host --fit --json 2>&1) &&
    echo "$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["fits"] and j["table_store"] == "host", j["table_store"]
f = float(j["embedding_cache"]); assert 0 < f < 1, f
host = sum(w["host"] for w in j["workers"]); assert host <= 2 * 2**40, host
for w in j["workers"]:
    assert w["device"] <= 80 * 2**30 and w["tables_tiered"] > 0, w
print("cache %.4f of each large table, %.1f GiB GPU, %.0f GiB host" % (f, max(w["device"] for w in j["workers"]) / 2**30, host / 2**30))
' >"$TMP/fit.txt" 2>&1; then
    ok "plan --fit: 1 node x 8 x 80 GB + 2 TB host with --table_store host fits ($(cat "$TMP/fit.txt"))"
else
    fail "plan --fit: 1 node x 8 x 80 GB + 2 TB host with --table_store host fits" "$(tail -n 3 "$TMP/fit.txt") $out"
fi
out=$($T plan $SEED --host_memory_per_node 1T --table_store host --fit 2>&1)
rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "error: --fit: no table store fits" &&
    ok "plan --fit: host memory of 1 TB cannot hold the rows" || fail "plan --fit: 1 TB host refused" "rc=$rc $out"
# the cpu: 26 tables of 28 M rows, dim 16 (45 GiB) over 8 GB of memory: a cache over a disk
CPU="--synthetic_dataset_cardinalities 26x28000000 --embedding_dim 16 --bottom_mlp_dims 64,16 --top_mlp_dims 64,1
     --backend cpu --memory_per_worker 8G"
out=$($T plan $CPU --fit --disk_per_node 70G 2>&1)
echo "$out" | grep -q "^fit: --table_store file:DIR --embedding_cache 0\.[0-9]*$" && echo "$out" | grep -q "fits: yes" &&
    ok "plan --fit on the cpu: a file store ($(echo "$out" | head -n 1))" ||
    fail "plan --fit on the cpu: a file store" "$out"
out=$($T plan $CPU --table_store file:/nvme --embedding_cache 0.05 --disk_per_node 30G 2>&1)
rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "error: node 0's workers need .* of local disk .* over --disk_per_node 30.00 GiB" &&
    ok "plan: files larger than --disk_per_node refused" || fail "plan: --disk_per_node refused" "rc=$rc $out"
done_testing
