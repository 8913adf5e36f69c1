#!/usr/bin/env bash
# bench_hybrid.sh [--steps N] [--backend cpu|cuda] [--comm mpi|nccl]: hybrid-parallel
# training throughput on this machine for N = 1 and N = 2 workers (mpirun; on the
# cpu backend 1 thread each, on cuda both workers share GPU 0: the communication
# cost made visible), column-wise and table-wise, with the bytes each worker moves
# per step through the all-to-all and the all-reduce checked against the analytic
# formula, and the share of the step spent in those collectives with the
# collectives overlapped with compute (--overlap, the default) and without. A
# benchmark, not a test: it prints figures, asserts nothing about speed (it exits
# 1 only if the measured bytes disagree with the formula). TR_BUILD picks the build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
W=${TR_BUILD:-$root/build}/bin/terarec-worker
steps=300 backend=cpu comm=mpi
while [ $# -gt 0 ]; do
    case "$1" in
    --steps) steps=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --comm) comm=$2; shift 2 ;;
    *) echo "bench_hybrid.sh: unknown argument $1" >&2; echo "hint: --steps N --backend cpu|cuda --comm mpi|nccl" >&2; exit 2 ;;
    esac
done
[ -x "$W" ] || make -C "$root" -s -j2 >/dev/null
command -v mpirun >/dev/null || { echo "mpirun not found (make deps)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
B=4096 T=26 D=16 ROWS=100000 THREADS="--threads 1"
if [ "$backend" = cuda ]; then # the seed's single-GPU shape, a smaller batch so two workers fit one GPU
    B=16384 D=128 ROWS=1000000 THREADS="--gpus_per_node 1"
fi
if [ "$backend" = cuda ] && [ "$comm" = nccl ]; then
    gpus=$($W --version --parsable | sed -n 's/^cuda_devices://p')
    [ "${gpus:-0}" -ge 2 ] || {
        echo "bench_hybrid.sh: --comm nccl needs a GPU for each of the 2 workers; this machine has ${gpus:-0}" >&2
        echo "hint: --comm mpi runs 2 workers on one GPU" >&2
        exit 2
    }
    THREADS="--gpus_per_node 2" # NCCL: a GPU for each worker
fi
MODEL="--batch_size $B --synthetic_dataset_cardinalities ${T}x$ROWS --embedding_dim $D --bottom_mlp_dims 512,256,$D
       --top_mlp_dims 512,256,1 --learning_rate 0.1 --warmup_steps 0 --max_steps $steps --print_freq $steps
       --benchmark_warmup_steps 20 --synthetic_dataset_valid_batches 1 --synthetic_dataset_train_batches 50
       --backend $backend $THREADS"
echo "model: $T tables x $ROWS rows, dim $D, bottom 512,256,$D, top 512,256,1, global batch $B, $steps steps, backend $backend, --comm $comm"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
if [ "$backend" = cuda ]; then
    echo "gpu: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)"
fi
run() { # name n extra...: a failed run shows the end of its output
    local name=$1 n=$2 rc=0; shift 2
    if [ "$n" -eq 1 ]; then
        $W $MODEL "$@" --log_path "$tmp/$name.json" >"$tmp/$name.out" 2>&1 || rc=$?
    else
        mpirun -np "$n" $W $MODEL "$@" --log_path "$tmp/$name.json" >"$tmp/$name.out" 2>&1 || rc=$?
    fi
    [ $rc -eq 0 ] || { echo "bench_hybrid.sh: run $name failed (exit $rc):" >&2; tail -n 15 "$tmp/$name.out" >&2; exit 1; }
}
run n1 1 --comm "$comm"
for ov in true false; do
    run "n2col-$ov" 2 --columnwise_split --data_parallel_bottom_mlp --comm "$comm" --overlap=$ov
    run "n2tab-$ov" 2 --data_parallel_bottom_mlp --comm "$comm" --overlap=$ov
done
python3 - "$tmp" "$B" "$T" "$D" <<'PYEOF'
import json, os, sys
tmp, B, T, D = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def final(name):
    return [json.loads(l[5:]) for l in open(os.path.join(tmp, name + ".json")) if l.startswith("DLLL ")][-1]["data"]
def nparams(num_ld, bottom, top_in, top):
    n, i = 0, num_ld
    for o in bottom:
        n += i * o + o; i = o
    i = top_in
    for o in top:
        n += i * o + o; i = o
    return n
n = T + 1
top_in = (D + n * (n - 1) // 2 + 7) // 8 * 8
P = nparams(16, [512, 256, D], top_in, [512, 256, 1])
base = final("n1")
print("N=1: %9.0f samples/s, %.2f ms/step" % (base["throughput"], base["mean_step_time_ms"]))
bad = 0
for name, mode in (("n2col", "column-wise"), ("n2tab", "table-wise")):
    f, fs = final(name + "-true"), final(name + "-false")
    c, cs = f["comm"], fs["comm"]
    N = 2
    nl = [B // N + (r < B % N) for r in range(N)]
    if mode == "column-wise":
        w = [D // N + (r < D % N) for r in range(N)]
        # rank 0: forward sends its columns of the other slice; backward returns the other ranks' columns of its slice
        a2a = 4 * ((B - nl[0]) * T * w[0] + nl[0] * T * (D - w[0]))
    else:
        # the seed's placement of 26 equal tables on 2 workers: 13 each (ceil(26/2))
        v = 13
        a2a = 4 * ((B - nl[0]) * v * D + nl[0] * (T - v) * D)
    ar = 4 * P + 8  # dense gradients (bottom and top, data-parallel) + the loss (double)
    ok_a2a = abs(c["alltoall_bytes_per_step"] - a2a) < 1
    ok_ar = abs(c["allreduce_payload_bytes_per_step"] - ar) < 1
    bad += (not ok_a2a) + (not ok_ar)
    comm_ms = c["alltoall_ms_per_step"] + c["allreduce_ms_per_step"]
    comm_s = cs["alltoall_ms_per_step"] + cs["allreduce_ms_per_step"]
    print("N=2 %-11s: %9.0f samples/s (%.2fx N=1), %.2f ms/step; without overlap %9.0f samples/s, %.2f ms/step" % (mode, f["throughput"], f["throughput"] / base["throughput"], f["mean_step_time_ms"], fs["throughput"], fs["mean_step_time_ms"]))
    print("    all-to-all bytes/step (rank 0): measured %d, formula %d %s" % (c["alltoall_bytes_per_step"], a2a, "ok" if ok_a2a else "MISMATCH"))
    print("    all-reduce payload/step: measured %d, formula 4*%d params + 8 = %d %s (a ring all-reduce moves 2(N-1)/N = 1x that per rank)" % (c["allreduce_payload_bytes_per_step"], P, ar, "ok" if ok_ar else "MISMATCH"))
    print("    communication left exposed (rank 0; includes waiting for the slower rank):")
    print("      overlapped: all-to-all %.2f ms + all-reduce %.2f ms = %.1f%% of the step" % (c["alltoall_ms_per_step"], c["allreduce_ms_per_step"], 100 * comm_ms / f["mean_step_time_ms"]))
    print("      serial:     all-to-all %.2f ms + all-reduce %.2f ms = %.1f%% of the step" % (cs["alltoall_ms_per_step"], cs["allreduce_ms_per_step"], 100 * comm_s / fs["mean_step_time_ms"]))
sys.exit(1 if bad else 0)
PYEOF
