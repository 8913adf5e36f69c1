#!/usr/bin/env bash
# gpu_train_bench.sh: terarec's CUDA backend against PyTorch on the same GPU, in one
# run, on the seed's single-GPU model: 26 tables with the Criteo Kaggle cardinalities
# (33.76 M rows), dim 128, bottom 512,256,128, top 1024,1024,512,256,1, global batch
# 65536, SGD, ids uniform per table. Rows: terarec fp32 (exact), --allow_tf32,
# --amp (bf16) and --amp fp16, each with its phase split; PyTorch eager and with
# torch.compile'd MLPs, TF32 and bf16 autocast (bench/torch_dlrm_gpu.py); then the
# machine limits measured in the same run (random-row gathers, the model's GEMMs)
# and the share of that roofline each terarec row reaches. Prints one table; the
# goal line is terarec --amp / PyTorch's best bf16 >= 2.
#   bench/gpu_train_bench.sh [--quick] [--steps N] [--out DIR]
#     --quick   every table capped at 100k rows, batch 8192, 10 steps (a smoke run)
# Needs a CUDA device, a CUDA build (make) and PyTorch with CUDA; it does not retry
# noisy runs. terarec's samples/s is the worker's own summary over all its steps
# (the first, cold steps included; PyTorch's rows discard 10 warmup steps), and its
# data phase is part of its step: 4 synthetic training batches, made on the host on
# the first step and kept (DATASET_CACHE_BYTES), each step copies one and sends it
# to the GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/bench_gpu
steps=60
quick=0
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --steps) steps="$2"; shift ;;
    --out) out="$2"; shift ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_train_bench: unknown argument '$1'" >&2; echo "hint: see $0 --help" >&2; exit 2 ;;
    esac
    shift
done
W=build/bin/terarec-worker
[ -x "$W" ] || { echo "gpu_train_bench: $W not built (make)" >&2; exit 1; }
devs=$($W --version --parsable | sed -n 's/^cuda_devices://p')
if [ "${devs:-0}" -lt 1 ]; then
    echo "gpu_train_bench: no CUDA device visible (cuda_devices: ${devs:-none}); nothing to measure" >&2
    exit 1
fi
mkdir -p "$out"
cards=1460,583,10131227,2202608,305,24,12517,633,3,93145,5683,8351593,3194,27,14992,5461306,10,5652,2173,4,7046547,18,15,286181,105,142572
batch=65536 py_extra=()
if [ $quick = 1 ]; then
    cards=$(echo "$cards" | tr ',' '\n' | awk '{print ($1 > 100000 ? 100000 : $1)}' | paste -sd,)
    batch=8192 steps=10 py_extra=(--card_cap 100000)
fi
model=(--synthetic_dataset_cardinalities "$cards" --embedding_dim 128 --bottom_mlp_dims 512,256,128
       --top_mlp_dims 1024,1024,512,256,1 --batch_size "$batch" --optimizer sgd --learning_rate 0.01
       --warmup_steps 0 --synthetic_ids uniform --synthetic_dataset_train_batches 4
       --synthetic_dataset_valid_batches 1 --evals_per_epoch 0
       --backend cuda --print_freq 1000000)

run_terarec() { # NAME FLAGS...: prints one JSON line
    local name=$1; shift
    $W "${model[@]}" "$@" --max_steps "$steps" --log_path "$out/$name.json" > "$out/$name.log" 2>&1 || {
        echo "gpu_train_bench: terarec $name failed; see $out/$name.log" >&2
        tail -5 "$out/$name.log" >&2
        return 1
    }
    python3 - "$out/$name.json" "$name" <<'PY'
import json, sys
summ = None
for line in open(sys.argv[1]):
    if line.startswith("DLLL "):
        d = json.loads(line[5:]).get("data", {})
        if "throughput" in d:
            summ = d
print(json.dumps({"kind": "terarec", "mode": sys.argv[2], "samples_per_s": summ["throughput"],
                  "step_ms": summ["mean_step_time_ms"], "phases": summ.get("phase_ms_per_step", {})}))
PY
}
py=/usr/bin/python3
res=$out/results.jsonl
: > "$res"
run_terarec fp32 >> "$res"
run_terarec tf32 --allow_tf32 >> "$res"
run_terarec amp-bf16 --amp >> "$res"
run_terarec amp-fp16 --amp fp16 >> "$res"
for mode in "fp32" "bf16" "fp32 --compile" "bf16 --compile"; do
    set -- $mode
    "$py" bench/torch_dlrm_gpu.py --batch "$batch" --steps "$steps" --amp "$@" "${py_extra[@]}" >> "$res" \
        2> "$out/torch-$1${2:-}.log" || echo "gpu_train_bench: PyTorch $mode failed; see $out/torch-$1${2:-}.log" >&2
done
"$py" bench/torch_dlrm_gpu.py --batch "$batch" --probe "${py_extra[@]}" >> "$res" 2> "$out/probe.log" ||
    echo "gpu_train_bench: the limits probe failed; see $out/probe.log" >&2

python3 - "$res" "$batch" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
B = int(sys.argv[2])
tr = {r["mode"]: r for r in rows if r["kind"] == "terarec"}
pt = {r["mode"]: r for r in rows if r["kind"] == "train"}
gather = next((r for r in rows if r["kind"] == "gather"), None)
gemms = [r for r in rows if r["kind"] == "gemm"]
dev = next((r.get("device") for r in rows if "device" in r), "?")
print(f"device: {dev}")
print(f"{'run':<28}{'samples/s':>14}{'step ms':>10}")
for k, r in tr.items():
    print(f"{'terarec ' + k:<28}{r['samples_per_s']:>14,.0f}{r['step_ms']:>10.2f}")
for k, r in pt.items():
    print(f"{'pytorch ' + k:<28}{r['samples_per_s']:>14,.0f}{r['step_ms']:>10.2f}")
if tr:
    print("\nphase split, ms per step:")
    names = list(next(iter(tr.values()))["phases"].keys())
    print(f"{'':<12}" + "".join(f"{n[:11]:>12}" for n in names))
    for k, r in tr.items():
        print(f"{k:<12}" + "".join(f"{r['phases'].get(n, 0):>12.3f}" for n in names))
best_bf16 = max((r["samples_per_s"] for k, r in pt.items() if "bf16" in k), default=None)
best_any = max((r["samples_per_s"] for r in pt.values()), default=None)
amp = tr.get("amp-bf16")
if amp and best_bf16:
    ratio = amp["samples_per_s"] / best_bf16
    print(f"\nterarec --amp / PyTorch's best bf16: {ratio:.2f}x (goal >= 2x: {'met' if ratio >= 2 else 'NOT met'})")
if tr.get("tf32") and best_any:
    print(f"terarec --allow_tf32 / PyTorch's best: {tr['tf32']['samples_per_s'] / best_any:.2f}x")
if gather and gemms:
    # the step's floor: every embedding row read once and written once (sparse SGD),
    # and every MLP GEMM three times (forward, two backward products) at the probe's rate
    print(f"\nlimits: random {gather['row_bytes']}-byte row gathers {gather['rows_per_s'] / 1e9:.2f} G rows/s "
          f"({gather['bytes_per_s'] / 1e12:.2f} TB/s read+write)")
    for prec in ("fp32", "tf32", "bf16"):
        g = [r for r in gemms if r["prec"] == prec]
        t = sum(3 * 2 * r["m"] * r["k"] * r["n"] / (r["tflops"] * 1e12) for r in g)
        peak = max(r["tflops"] for r in g)
        print(f"  {prec}: the model's GEMMs at measured rates {t * 1e3:.2f} ms per step (best shape {peak:.0f} TFLOP/s)")
    emb_t = 2 * 26 * B / gather["rows_per_s"]
    for k, prec in (("fp32", "fp32"), ("tf32", "tf32"), ("amp-bf16", "bf16"), ("amp-fp16", "bf16")):
        if k not in tr:
            continue
        g = [r for r in gemms if r["prec"] == prec]
        floor = emb_t + sum(3 * 2 * r["m"] * r["k"] * r["n"] / (r["tflops"] * 1e12) for r in g)
        print(f"  terarec {k}: {floor * 1e3:.2f} ms floor vs {tr[k]['step_ms']:.2f} ms measured: "
              f"{floor * 1e3 / tr[k]['step_ms'] * 100:.0f}% of the roofline")
PY
