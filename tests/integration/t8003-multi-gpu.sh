#!/usr/bin/env bash
# t8003: the collectives of the hybrid step: --comm, staging, overlap, NCCL.
# On every machine (these run in CI, which has no GPU):
# - Open MPI staged through host buffers (TR_COMM_STAGE=1: the path GPU buffers take
#   when Open MPI is not CUDA-aware, here on the cpu backend) on N = 2 and 3 workers,
#   column-wise and table-wise, trains the same model as N = 1: every loss within
#   1e-5, every weight within 1e-4 (compare_runs.py; t2002 says why 1e-4);
# - --overlap=false (every collective ends where it starts) and the default
#   (overlapped) train the same model: bitwise on N = 2, within the bounds on N = 3;
# - the all-to-all bytes per step the worker reports equal the formula, and the
#   all-reduce payload equals the dense parameters plus the loss;
# - --comm nccl on the cpu backend: exit 1, an error naming --comm, a hint, no
#   step; --comm with a bad value: exit 2; terarec train passes --comm on;
# - workers sharing GPUs, told by device UUID (TR_TEST_DEVICE_ID stands in for the
#   GPU's on the cpu backend): 3 workers on 2 GPUs refuse --comm nccl and a
#   --gpus_per_node 3 naming the node (and the ranks that share), and take MPI
#   under --comm auto; workers on a GPU each (tasks bound to one GPU each) are not
#   taken for sharing;
# - a peer killed (SIGKILL) while the ranks train (two all-to-alls a step): every
#   other rank exits within 30 s and mpirun names the killed rank.
# With a GPU (each SKIPs without one; TR_TEST_GPU=1 makes that a failure):
# - N = 2 and 3 workers sharing the one device with --comm mpi (N = 2: --comm auto,
#   which takes MPI there and says so) train the same model as N = 1 on the GPU and
#   as the cpu backend, both split modes; --comm nccl there is refused (NCCL needs
#   a GPU for each worker) with the node named and a hint;
# - --comm nccl on a world of 1 (and on every device when there are several)
#   passes the same comparison;
# - the killed peer, with the cuda backend.
# TR_T8003_PART=gpu-world1 runs only the cpu references and the GPU cases of a world
# of 1 (no mpirun needed): what tools/gpu_check.sh runs on a one-GPU machine.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
cd "$TMP" || exit 1
part=${TR_T8003_PART:-}
case "$part" in ''|gpu-world1) ;; *) fail "TR_T8003_PART=$part" "not one of: gpu-world1"; done_testing ;; esac
if [ -z "$part" ] && ! command -v mpirun >/dev/null 2>&1; then
    skip "multi-worker collectives" "mpirun not found (install openmpi-bin: make deps)"
    done_testing
fi
use_mpi
CMP="python3 $TR_ROOT/tests/integration/compare_runs.py --wtol 1e-4"
CMP_EXTRA=""
CARDS=30,7,50,7,1000,3,200,90,5,64
base() { # dim
    echo "--batch_size 250 --synthetic_dataset_cardinalities $CARDS --embedding_dim $1 --bottom_mlp_dims 16,$1
          --top_mlp_dims 16,1 --learning_rate 0.5 --warmup_steps 0 --max_steps 20 --print_freq 1
          --synthetic_dataset_valid_batches 2 --synthetic_dataset_train_batches 50 --threads 1"
}
COL="--columnwise_split --data_parallel_bottom_mlp"
# run NAME N EXTRA...: trains into $TMP/NAME (log.json + rank*.bin, out.txt)
run() {
    local name=$1 n=$2; shift 2
    mkdir -p "$TMP/$name"
    if [ "$n" -eq 1 ]; then
        timeout 300 $W $(base 8) "$@" --log_path "$TMP/$name/log.json" --dump_weights "$TMP/$name" \
            >"$TMP/$name/out.txt" 2>&1
    else
        timeout 300 mpirun -np "$n" -x TR_COMM_STAGE $W $(base 8) "$@" --log_path "$TMP/$name/log.json" \
            --dump_weights "$TMP/$name" >"$TMP/$name/out.txt" 2>&1
    fi || { tail -n 20 "$TMP/$name/out.txt" | sed 's/^/# /'; return 1; }
}
equiv() { # NAME REF N EXTRA...: runs, compares with REF
    local name=$1 ref=$2 n=$3; shift 3
    if run "$name" "$n" "$@"; then same "$name" "$ref" "$n"; else fail "$name: N=$n equals $ref" "run failed"; fi
}
same() { # NAME REF N: the run NAME (N workers) trained the model of REF
    local out
    if out=$($CMP $CMP_EXTRA "$TMP/$2" "$TMP/$1" 2>&1); then
        ok "$1: N=$3 equals $2 ($(echo "$out" | tail -n 1))"
    else
        fail "$1: N=$3 equals $2" "$(echo "$out" | grep -v '^ok' | tail -n 8)"
    fi
}
comm_stat() { # NAME KEY: the summary's comm.KEY
    python3 - "$TMP/$1/log.json" "$2" <<'PY'
import json, sys
v = None
for line in open(sys.argv[1]):
    if line.startswith("DLLL "):
        c = json.loads(line[5:]).get("data", {}).get("comm")
        if isinstance(c, dict) and sys.argv[2] in c:
            v = c[sys.argv[2]]
print(v)
PY
}

# ---- staging, overlap, traffic (cpu backend) --------------------------------------------------
export TR_COMM_STAGE=0
run ref-col 1 $COL --backend cpu && ok "reference run, column-wise" || fail "reference run, column-wise"
run ref-tab 1 --data_parallel_bottom_mlp --backend cpu && ok "reference run, table-wise" ||
    fail "reference run, table-wise"
devices=$($W --version --parsable 2>/dev/null | sed -n 's/^cuda_devices://p')
devices=${devices:-0}
gpu_skip() { # NAME
    if [ "${TR_TEST_GPU:-0}" = 1 ]; then
        fail "$1" "no CUDA device, and TR_TEST_GPU=1 requires one"
    else
        skip "$1" "no CUDA device ($($W --version --parsable | grep -q '^cuda:yes' && echo "0 visible" || echo "built without CUDA"))"
    fi
}
# the GPU's references (self communicator), and --comm nccl on a world of 1 against
# the cpu backend's
world1_gpu() {
    run gref-col 1 $COL --backend cuda || fail "cuda reference run, column-wise"
    run gref-tab 1 --data_parallel_bottom_mlp --backend cuda || fail "cuda reference run, table-wise"
    same gref-col ref-col 1
    same gref-tab ref-tab 1
    equiv "nccl-col-n1" ref-col 1 $COL --backend cuda --comm nccl
    equiv "nccl-tab-n1" ref-tab 1 --data_parallel_bottom_mlp --backend cuda --comm nccl
}
if [ "$part" = gpu-world1 ]; then
    if [ "$devices" -eq 0 ]; then
        gpu_skip "cuda --comm nccl: world of 1 equals the cpu backend"
    else
        world1_gpu
    fi
    done_testing
fi
export TR_COMM_STAGE=1
for n in 2 3; do
    TR_LOG=info equiv "staged-col-n$n" ref-col "$n" $COL --backend cpu --comm mpi
    equiv "staged-tab-n$n" ref-tab "$n" --data_parallel_bottom_mlp --backend cpu --comm mpi
done
if grep -q "collectives: mpi, overlapped" "$TMP/staged-col-n2/out.txt"; then
    ok "the worker says which collectives it uses (mpi, overlapped)"
else
    fail "the worker names its collectives" "$(grep -i collectives "$TMP/staged-col-n2/out.txt")"
fi
export TR_COMM_STAGE=0
for n in 2 3; do
    run "serial-col-n$n" "$n" $COL --backend cpu --overlap=false || fail "--overlap false, N=$n"
    run "overlap-col-n$n" "$n" $COL --backend cpu || fail "--overlap (default), N=$n"
done
# two ranks add in one order whatever MPI's algorithm: the same bits
if python3 - "$TMP/serial-col-n2" "$TMP/overlap-col-n2" <<'PY'
import glob, json, os, sys
a, b = sys.argv[1], sys.argv[2]
def losses(d):
    return [json.loads(l[5:])["data"].get("loss") for l in open(os.path.join(d, "log.json")) if l.startswith("DLLL ")]
ok = losses(a) == losses(b) and [x for x in losses(a) if x is not None]
for f in sorted(glob.glob(os.path.join(a, "*.bin"))):
    ok = ok and open(f, "rb").read() == open(os.path.join(b, os.path.basename(f)), "rb").read()
sys.exit(0 if ok and glob.glob(os.path.join(a, "*.bin")) else 1)
PY
then
    ok "--overlap and --overlap false on N=2: bitwise-identical losses and weights"
else
    fail "--overlap and --overlap false on N=2: bitwise-identical losses and weights"
fi
if out=$($CMP "$TMP/serial-col-n3" "$TMP/overlap-col-n3" 2>&1); then
    ok "--overlap and --overlap false on N=3: the same model ($(echo "$out" | tail -n 1))"
else
    fail "--overlap and --overlap false on N=3" "$(echo "$out" | tail -n 5)"
fi
# all-to-all bytes a step of rank 0 (column-wise): forward, its columns (w0) of the
# other ranks' samples; backward, the other ranks' columns of its own samples
# (4 bytes each). All-reduce: every dense parameter (408 bottom + 1057 top) and the
# loss sum (8 bytes).
for n in 2 3; do
    want=$(python3 -c "
T, D, B, N = 10, 8, 250, $n
cols0 = D // N + (1 if D % N else 0)
nl0 = B // N + (1 if B % N else 0)
print(float(4 * ((B - nl0) * T * cols0 + nl0 * T * (D - cols0))))")
    got=$(comm_stat "overlap-col-n$n" alltoall_bytes_per_step)
    ar=$(comm_stat "overlap-col-n$n" allreduce_payload_bytes_per_step)
    if [ "$got" = "$want" ] && [ "$ar" = "5868.0" ]; then
        ok "N=$n: all-to-all $got bytes a step (the formula's), all-reduce payload $ar bytes"
    else
        fail "N=$n: collective bytes against the formula" "all-to-all $got (formula $want), all-reduce $ar (formula 5868.0)"
    fi
done

# ---- bad input ------------------------------------------------------------------------------
out=$($W $(base 8) --backend cpu --comm nccl --max_steps 2 2>&1); rc=$?
if [ $rc -eq 1 ] && echo "$out" | grep -m1 "error: " | grep -q "error: --comm nccl: backend 'cpu'" &&
    echo "$out" | grep -q "hint: " && ! echo "$out" | grep -q "step=1"; then
    ok "--comm nccl on the cpu backend: exit 1, the first error names --comm, a hint"
else
    fail "--comm nccl on the cpu backend" "rc $rc: $(echo "$out" | tail -3)"
fi
out=$($W $(base 8) --comm gloo --max_steps 2 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q -- "--comm" && ok "--comm gloo: exit 2 naming the flag" ||
    fail "--comm gloo" "rc $rc: $(echo "$out" | tail -2)"
out=$($TR_BIN/terarec train --workers 2 --comm mpi --overlap=false --dry_run $(base 8) 2>&1)
if echo "$out" | grep "^workers:" | grep -q -- "--comm=mpi" && echo "$out" | grep "^workers:" | grep -q -- "--overlap=false"; then
    ok "terarec train passes --comm and --overlap to the workers"
else
    fail "terarec train passes --comm and --overlap on" "$(echo "$out" | grep '^workers:')"
fi

# ---- which workers share a GPU ------------------------------------------------------------------
# Told by the devices' UUIDs, which TR_TEST_DEVICE_ID stands in for on the cpu backend:
# here ranks 0 and 2 of 3 report one GPU and rank 1 another (as 3 workers on 2 GPUs).
# shared N EXTRA...: N ranks, rank r on "GPU-test-(r mod 2)", 2 steps
shared() {
    local n=$1; shift
    timeout 300 mpirun -np "$n" bash -c 'TR_TEST_DEVICE_ID=GPU-test-$((OMPI_COMM_WORLD_RANK % 2)) exec "$@"' _ \
        $W $(base 8) --max_steps 2 "$@" 2>&1
}
out=$(shared 3 --comm nccl); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "error: --comm nccl: node 0 (.*) runs 3 workers on 2 GPU(s) (ranks 0 and 2 share GPU-test-0)" &&
    echo "$out" | grep -q "hint: --comm mpi" && ! echo "$out" | grep -q "ending the job" &&
    ! echo "$out" | grep -q "step=1,"; then
    ok "--comm nccl, 3 workers on 2 GPUs (by UUID): refused before training, naming the node, the ranks, a hint"
else
    fail "--comm nccl, 3 workers on 2 GPUs (by UUID) is refused" "rc $rc: $(echo "$out" | grep -E 'error|hint|share' | head -3)"
fi
out=$(shared 3 --gpus_per_node 3); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "error: --gpus_per_node 3: the 3 workers of node 0 (.*) compute on 2 distinct GPU(s) (ranks 0 and 2 share GPU-test-0)" &&
    echo "$out" | grep -q "hint: check the allocation's GPU binding" && ! echo "$out" | grep -q "step=1,"; then
    ok "--gpus_per_node 3, 3 workers on 2 GPUs (by UUID): refused before training, naming the node and a hint"
else
    fail "--gpus_per_node 3, 3 workers on 2 GPUs is refused" "rc $rc: $(echo "$out" | grep -E 'error|hint' | head -3)"
fi
out=$(TR_LOG=info shared 3 --gpus_per_node 2); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -q -- "--comm auto: MPI, since workers share GPUs" &&
    echo "$out" | grep -q "node 0 (.*): 3 workers compute on 2 GPU(s); ranks 0 and 2 share GPU-test-0" &&
    echo "$out" | grep -q "step=2,"; then
    ok "--comm auto, 3 workers on 2 GPUs (--gpus_per_node 2): MPI, said so, trains"
else
    fail "--comm auto, 3 workers on 2 GPUs takes MPI" "rc $rc: $(echo "$out" | grep -E 'error|comm|share' | head -3)"
fi
# a GPU each (as tasks bound by srun --gpus-per-task=1, each seeing its own as device
# 0): no sharing, so --comm nccl is not refused for it (the cpu backend refuses it)
out=$(timeout 300 mpirun -np 2 bash -c 'TR_TEST_DEVICE_ID=GPU-test-$OMPI_COMM_WORLD_RANK exec "$@"' _ \
    $W $(base 8) --max_steps 2 --comm nccl --gpus_per_node 2 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "error: --comm nccl: backend 'cpu'" && ! echo "$out" | grep -q "share"; then
    ok "2 workers on a GPU each (by UUID): not taken for sharing; --comm nccl goes on to the backend's refusal"
else
    fail "2 workers on a GPU each are not taken for sharing" "rc $rc: $(echo "$out" | grep -E 'error|share' | head -3)"
fi

# ---- a killed peer ----------------------------------------------------------------------------
# killed NAME BACKEND EXTRA...: 3 ranks train for long; rank 1 is killed once they
# step; the others must be gone within 30 s and mpirun must name rank 1
killed() {
    local name=$1 be=$2; shift 2
    mkdir -p "$TMP/$name"
    timeout 300 mpirun -np 3 $W $(base 8) --backend "$be" "$@" --max_steps 1000000 --print_freq 1 \
        --synthetic_dataset_train_batches 1000000 >"$TMP/$name/out.txt" 2>&1 &
    local job=$! victim="" t0 t1 w
    for _ in $(seq 1 600); do # up to 60 s for the ranks to start stepping
        for p in $(own_pids "terarec-worker.*--backend $be"); do
            if tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then victim=$p; fi
        done
        [ -n "$victim" ] && grep -q "step=2," "$TMP/$name/out.txt" && break
        sleep 0.1
    done
    if [ -z "$victim" ]; then
        kill $job 2>/dev/null; wait $job 2>/dev/null
        fail "$name: a killed peer" "rank 1 never started: $(tail -3 "$TMP/$name/out.txt")"
        return
    fi
    t0=$(date +%s.%N)
    kill -KILL "$victim"
    wait $job
    t1=$(date +%s.%N)
    w=$(python3 -c "print(f'{$t1 - $t0:.1f}')")
    left=$(own_pids "terarec-worker.*--backend $be" | wc -l)
    if python3 -c "import sys; sys.exit(0 if $t1 - $t0 < 30 else 1)" && [ "$left" -eq 0 ] &&
        grep -qE "rank 1 .*(exited on signal 9|killed)" "$TMP/$name/out.txt"; then
        ok "$name: rank 1 killed mid-training: the others gone in $w s, mpirun names rank 1"
    else
        fail "$name: a killed peer" "after $w s, $left workers left: $(grep -i "rank 1" "$TMP/$name/out.txt" | tail -2)"
    fi
}
killed kill-cpu cpu $COL

# ---- with a GPU -----------------------------------------------------------------------------
if [ "$devices" -eq 0 ]; then
    for m in col tab; do
        gpu_skip "cuda, $m: N=2 and 3 sharing one GPU (--comm mpi) equal N=1 on the GPU and the cpu backend"
    done
    gpu_skip "cuda --comm nccl: world of 1 (and every device) equals the cpu backend"
    gpu_skip "--comm nccl with 2 workers on one GPU is refused"
    gpu_skip "cuda: a killed peer ends the job within 30 s"
else
    export TR_COMM_STAGE=0
    world1_gpu
    # each GPU run once, compared with the GPU's reference and the cpu backend's;
    # --comm auto (the default) takes MPI where workers share a GPU
    for n in 2 3; do
        for m in col tab; do
            if [ $m = col ]; then x=$COL; else x=--data_parallel_bottom_mlp; fi
            [ $n = 2 ] && c= || c="--comm mpi"
            if TR_LOG=info run "gpu-$m-n$n" "$n" $x --backend cuda $c; then
                same "gpu-$m-n$n" "gref-$m" "$n"
                same "gpu-$m-n$n" "ref-$m" "$n"
            else
                fail "gpu-$m-n$n: N=$n on one GPU (${c:---comm auto})" "run failed"
            fi
        done
    done
    if grep -q "collectives are staged through page-locked host memory\|CUDA-aware" "$TMP/gpu-col-n2/out.txt" &&
        grep -q -- "--comm auto: MPI, since workers share GPUs" "$TMP/gpu-col-n2/out.txt"; then
        ok "cuda, 2 workers on one GPU: --comm auto takes MPI and says whether Open MPI is CUDA-aware"
    else
        fail "cuda, 2 workers on one GPU: --comm auto takes MPI, names the staging" \
            "$(grep -iE "mpi|comm" "$TMP/gpu-col-n2/out.txt" | head -3)"
    fi
    if [ "$devices" -lt 2 ]; then
        out=$(timeout 300 mpirun -np 2 $W $(base 8) --backend cuda --comm nccl --max_steps 2 2>&1); rc=$?
        if [ $rc -ne 0 ] && echo "$out" | grep -q "error: --comm nccl: node 0 (.*) runs 2 workers on 1 GPU(s)" &&
            echo "$out" | grep -q "hint: --comm mpi" && ! echo "$out" | grep -q "step=1,"; then
            ok "--comm nccl with 2 workers on one GPU: refused before training, naming the node and a hint"
        else
            fail "--comm nccl with 2 workers on one GPU is refused" "rc $rc: $(echo "$out" | grep -E 'error|hint' | head -3)"
        fi
    fi
    if [ "$devices" -gt 1 ]; then
        equiv "nccl-col-n$devices" ref-col "$devices" $COL --backend cuda --comm nccl
        equiv "nccl-tab-n$devices" ref-tab "$devices" --data_parallel_bottom_mlp --backend cuda --comm nccl
    fi
    killed kill-cuda cuda $COL --comm mpi
    if [ "$devices" -gt 2 ]; then
        killed kill-nccl cuda $COL --comm nccl
    fi
fi
done_testing
