#!/usr/bin/env bash
# t2012: a model larger than the memory it may use trains with --table_store
# file:DIR. The test makes a memory cgroup of its own (cgroup v2 memory.max, or v1
# memory.limit_in_bytes where that is what the machine has) of 384 MiB and runs
# the worker in it: 2 tables of 6 M rows at dim 16 (768 MiB of rows) are refused in
# memory by the worker's plan (naming the cgroup) before anything is allocated,
# and train with a file store and a 1% cache, the cgroup's peak staying under its
# limit, with the losses of every step bitwise those of the same model trained in
# memory outside the cgroup. The cgroup is removed at the end. SKIP where this
# process may not make a memory cgroup (not root, no memory controller).
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
LIMIT=$((384 << 20)) # the worker's check keeps 256 MiB of headroom (plan.h)
CG=""
V=0
mine=$(sed -n 's/^0:://p' /proc/self/cgroup)
if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers &&
    mkdir "/sys/fs/cgroup${mine%/}/terarec-t2012-$$" 2>/dev/null; then
    CG="/sys/fs/cgroup${mine%/}/terarec-t2012-$$"
    V=2
    echo "$LIMIT" >"$CG/memory.max" || CG=""
else
    v1=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
    if [ -d /sys/fs/cgroup/memory ] && mkdir "/sys/fs/cgroup/memory${v1%/}/terarec-t2012-$$" 2>/dev/null; then
        CG="/sys/fs/cgroup/memory${v1%/}/terarec-t2012-$$"
        V=1
        echo "$LIMIT" >"$CG/memory.limit_in_bytes" || CG=""
    fi
fi
if [ -z "$CG" ]; then
    skip "a model larger than its memory cgroup trains with a file store" "cannot make a memory cgroup here"
    done_testing
fi
trap 'rmdir "$CG" 2>/dev/null; rm -rf "$TMP"' EXIT
# in_cg CMD...: runs CMD in the cgroup (a subshell moves itself in, then execs)
in_cg() {
    (echo $BASHPID >"$CG/cgroup.procs" && exec "$@")
}
BASE="--batch_size 2048 --synthetic_dataset_cardinalities 6000000,6000000,1000 --embedding_dim 16
      --bottom_mlp_dims 32,16 --top_mlp_dims 32,1 --learning_rate 0.5 --warmup_steps 0 --max_steps 20
      --print_freq 1 --synthetic_dataset_train_batches 20 --synthetic_dataset_valid_batches 0 --threads 2"
mkdir -p "$TMP/store" "$TMP/mem" "$TMP/file"
out=$(in_cg $W $BASE --log_path "" 2>&1)
rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "error: memory: rank 0 .* but its memory cgroup has" &&
    ! echo "$out" | grep -q "^step="; then
    ok "in memory, 768 MiB of tables is refused by the plan in a 384 MiB cgroup"
else
    fail "in memory, 768 MiB of tables is refused in a 384 MiB cgroup" "rc=$rc $(echo "$out" | tail -n 3)"
fi
out=$(in_cg $W $BASE --table_store "file:$TMP/store" --embedding_cache 0.01 --log_path "$TMP/file/log.json" 2>&1)
rc=$?
if [ $V = 2 ]; then peak=$(cat "$CG/memory.peak" 2>/dev/null || echo 0); else peak=$(cat "$CG/memory.max_usage_in_bytes"); fi
if [ $rc -eq 0 ] && [ "$(echo "$out" | grep -c '^step=')" -eq 20 ] && [ "$peak" -le "$LIMIT" ]; then
    ok "with --table_store file: it trains 20 steps in the cgroup (peak $((peak >> 20)) MiB of $((LIMIT >> 20)))"
else
    fail "with --table_store file: it trains in the cgroup" "rc=$rc peak=$peak $(echo "$out" | tail -n 4)"
fi
# the same model in memory, outside the cgroup: the same losses, bit for bit
if $W $BASE --log_path "$TMP/mem/log.json" >"$TMP/mem.out" 2>&1 &&
    python3 - "$TMP/mem/log.json" "$TMP/file/log.json" <<'EOF'; then
import json, sys
def losses(path):
    out = []
    for line in open(path):
        if line.startswith("DLLL "):
            r = json.loads(line[5:])
            if isinstance(r.get("data"), dict) and "loss" in r["data"] and r["step"] != []:
                out.append((r["step"], r["data"]["loss"]))
    return out
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == 20 and a == b, (len(a), len(b), [x for x in zip(a, b) if x[0] != x[1]][:3])
EOF
    ok "its 20 losses are bitwise those of the model trained in memory"
else
    fail "its losses are bitwise those of the model trained in memory" "$(tail -n 3 "$TMP/mem.out")"
fi
[ -z "$(ls -A "$TMP/store")" ] && ok "nothing left in the store's directory" || fail "nothing left in the store's directory"
rmdir "$CG" && ok "the test's cgroup is removed" || fail "the test's cgroup is removed"
done_testing
