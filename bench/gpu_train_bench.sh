#!/usr/bin/env bash
# gpu_train_bench.sh: terarec's CUDA backend against PyTorch on the same GPU, in one
# run, on the seed's single-GPU model: 26 tables with the Criteo Kaggle cardinalities
# (33.76 M rows), dim 128, bottom 512,256,128, top 1024,1024,512,256,1, global batch
# 65536, SGD, ids uniform per table. Rows: terarec --amp (bf16), fp32 (exact),
# --allow_tf32 and --amp fp16, each with its phase split; PyTorch eager and with
# torch.compile'd MLPs, TF32 and bf16 autocast (bench/torch_dlrm_gpu.py); then the
# machine limits measured in the same run (random-row gathers, device copies, the
# model's GEMMs), the share of that roofline each terarec row reaches, and the
# phases of the --amp row furthest from their floors. Prints one table; the goal
# line is terarec --amp / PyTorch's best >= 2.
#   bench/gpu_train_bench.sh [--quick] [--steps N] [--warmup N] [--budget S] [--out DIR]
#     --quick    every table capped at 100k rows, batch 8192, 10 steps (a smoke run)
#     --steps    timed steps of every row (default 60), after --warmup (default 10)
#                untimed ones: module loads, GEMM heuristics and first touches of
#                the tables stay out of every figure, terarec's phase split included
#     --budget   seconds for the whole run (default 600): each row gets a share of
#                what is left under `timeout`; a row that fails or runs out is
#                named, and the rows after it still run
# Needs a CUDA device, a CUDA build (make) and a python with PyTorch for CUDA: the
# first of $TR_PYTHON, python3 on PATH, /opt/*/.venv/bin/python3 and /usr/bin/python3
# that imports torch and sees the device (each one tried is named when none does).
# It does not retry noisy runs. terarec's data phase is part of its step: 4 synthetic
# training batches, made on the host on the first step and kept
# (DATASET_CACHE_BYTES); each step copies one and sends it to the GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
out=build/bench_gpu
steps=60
warm=10
budget=600
quick=0
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --steps) steps="$2"; shift ;;
    --warmup) warm="$2"; shift ;;
    --budget) budget="$2"; shift ;;
    --out) out="$2"; shift ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_train_bench: unknown argument '$1'" >&2; echo "hint: see $0 --help" >&2; exit 2 ;;
    esac
    shift
done
for v in steps warm budget; do
    [[ ${!v} =~ ^[0-9]+$ ]] || { echo "gpu_train_bench: --${v/warm/warmup} '${!v}' is not a number" >&2; exit 2; }
done
deadline=$(( $(date +%s) + budget ))
W=build/bin/terarec-worker
[ -x "$W" ] || { echo "gpu_train_bench: $W not built (make)" >&2; exit 1; }
devs=$($W --version --parsable | sed -n 's/^cuda_devices://p')
if [ "${devs:-0}" -lt 1 ]; then
    echo "gpu_train_bench: no CUDA device visible (cuda_devices: ${devs:-none}); nothing to measure" >&2
    exit 1
fi
mkdir -p "$out"

# a python that has PyTorch with CUDA (GPU machines keep it in a venv, not /usr/bin)
py=
tried=()
for c in "${TR_PYTHON:-}" "$(command -v python3 2>/dev/null)" /opt/*/.venv/bin/python3 /usr/bin/python3; do
    [ -n "$c" ] && [ -x "$c" ] || continue
    case " ${tried[*]} " in *" $c "*) continue ;; esac
    tried+=("$c")
    if "$c" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
        py=$c
        break
    fi
done
if [ -n "$py" ]; then
    echo "gpu_train_bench: PyTorch $("$py" -c 'import torch; print(torch.__version__)') from $py"
else
    echo "gpu_train_bench: no python with PyTorch for CUDA among: ${tried[*]:-none} (TR_PYTHON names another);" \
        "the PyTorch rows and the limits are left out" >&2
fi

cards=1460,583,10131227,2202608,305,24,12517,633,3,93145,5683,8351593,3194,27,14992,5461306,10,5652,2173,4,7046547,18,15,286181,105,142572
batch=65536 py_extra=()
if [ $quick = 1 ]; then
    cards=$(echo "$cards" | tr ',' '\n' | awk '{print ($1 > 100000 ? 100000 : $1)}' | paste -sd,)
    batch=8192 steps=10 warm=2 py_extra=(--card_cap 100000)
fi
model=(--synthetic_dataset_cardinalities "$cards" --embedding_dim 128 --bottom_mlp_dims 512,256,128
       --top_mlp_dims 1024,1024,512,256,1 --batch_size "$batch" --optimizer sgd --learning_rate 0.01
       --warmup_steps 0 --synthetic_ids uniform --synthetic_dataset_train_batches 4
       --synthetic_dataset_valid_batches 1 --evals_per_epoch 0
       --backend cuda --print_freq 1000000)
res=$out/results.jsonl
: > "$res"
failed=()
# limit SHARE MIN: seconds for the next row: SHARE of what is left (in 1/100), at
# least MIN (what such a row needs: on an H200, terarec's rows took 10-15 s, PyTorch's
# eager ones 25-40 s with its import and 17 GB of tables, the compiled ones 60-90 s)
limit() {
    local left=$(( deadline - $(date +%s) ))
    local l=$(( left * $1 / 100 ))
    [ $l -lt "$2" ] && l=$(( left < $2 ? left : $2 ))
    echo $l
}
run_row() { # NAME SHARE MIN CMD...: CMD's stdout (JSON lines) into results, its stderr into NAME.log
    local name=$1 share=$2 min=$3; shift 3
    local l
    l=$(limit "$share" "$min")
    if [ "$l" -le 5 ]; then
        echo "gpu_train_bench: $name not run: the budget is spent" >&2
        failed+=("$name (not run)")
        return
    fi
    local t0=$SECONDS
    timeout -k 5 "$l" "$@" >> "$res" 2> "$out/$name.log"
    local rc=$?
    if [ $rc -ne 0 ]; then
        [ $rc -eq 124 ] && echo "gpu_train_bench: $name stopped after $l s" >> "$out/$name.log"
        echo "gpu_train_bench: $name failed (exit $rc); see $out/$name.log:" >&2
        tail -n 5 "$out/$name.log" | sed 's/^/    /' >&2
        failed+=("$name")
    else
        echo "gpu_train_bench: $name: $(( SECONDS - t0 )) s"
    fi
}
# the rows run under `timeout` in a child bash, which gets the model as a string
export W out warm steps py batch model_s="${model[*]}" py_extra_s="${py_extra[*]}"
terarec_row() { # MODE FLAGS...: one JSON line from the worker's summary
    local mode=$1 model=($model_s); shift
    "$W" "${model[@]}" "$@" --benchmark_warmup_steps "$warm" --max_steps $(( warm + steps )) \
        --log_path "$out/$mode.json" >&2 || return 1
    python3 bench/gpu_bench_report.py row "$out/$mode.json" "$mode"
}
torch_row() { # FLAGS...: bench/torch_dlrm_gpu.py's JSON lines
    [ -n "$py" ] || { echo "no python with PyTorch for CUDA" >&2; return 1; }
    local extra=($py_extra_s)
    "$py" bench/torch_dlrm_gpu.py --batch "$batch" --steps "$steps" --warmup "$warm" "${extra[@]}" "$@"
}
export -f terarec_row torch_row
row_t() { local name=$1; shift; run_row "$name" 12 30 bash -c 'terarec_row "$@"' _ "$name" "$@"; }
row_p() { local name=$1 share=$2 min=$3; shift 3; run_row "$name" "$share" "$min" bash -c 'torch_row "$@"' _ "$@"; }

# the rows that decide the goal first, the slow compiled ones last
row_t amp-bf16 --amp
row_p torch-eager-bf16 15 50 --amp bf16
row_p torch-compiled-bf16 30 90 --amp bf16 --compile
row_p limits 15 30 --probe
row_t tf32 --allow_tf32
row_t fp32
row_t amp-fp16 --amp fp16
row_p torch-eager-fp32 20 50 --amp fp32
row_p torch-compiled-fp32 95 90 --amp fp32 --compile

python3 bench/gpu_bench_report.py table "$res" "$batch"
if [ ${#failed[@]} -gt 0 ]; then
    echo "gpu_train_bench: rows that failed or did not run: ${failed[*]}"
    exit 1
fi
