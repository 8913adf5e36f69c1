#!/usr/bin/env bash
# loader_bench.sh [--gb N] [--steps N]: the data path against the trainer, on
# Criteo-shaped split-binary data of at least N GB (default 1): the real Criteo
# sample (../shared/data, never copied into the repository) prepared once with
# `terarec data prepare --max_ind_range 100000`, its binary files then repeated
# until the training split reaches N GB (a temporary folder, removed at exit).
#
# Prints, measured in the same run:
#   1. the producer's rate (bench-bench_loader: the reader terarec-loader runs) from
#      the page cache with 1 and 2 decode threads: samples/s and GB/s of decoded
#      batches;
#   2. what training consumes: terarec-worker on the tiny config (bench_train's:
#      dim 16, bottom 512,256,16, top 512,256,1, batch 2048) over the same files, and
#      the ratio producer / consumer (the goal: at least 5);
#   3. read amplification: bytes every rank's process fetched from storage
#      (getrusage ru_inblock, after dropping the page cache) over one epoch of 1 and
#      of 4 workers, divided by the training files' size (the goal: 1.00; the small
#      test split evaluated at the end is included); needs root to drop the cache,
#      otherwise says so;
#   4. step time with terarec-loader (--loader shm:NAME) against the in-process
#      reader on the tiny config, when this build has terarec-loader.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
gb=1; steps=200
while [ $# -gt 0 ]; do
    case $1 in
    --gb) gb=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "usage: $0 [--gb N] [--steps N]" >&2; exit 2 ;;
    esac
done
data=${TR_CRITEO_SAMPLE:-$root/../shared/data/criteo_sample}/kaggle_train_random_0p3pct.tsv
[ -r "$data" ] || { echo "skipped: $data not found (the Criteo sample is not in the repository)"; exit 0; }
make -C "$root" -s -j2 >/dev/null
BIN=$root/build/bin
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; rm -f /dev/shm/terarec-lbench-$$' EXIT; trap 'exit 130' INT TERM
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

# --- the data: prepared once, repeated to N GB ---------------------------------------
"$BIN/terarec" data prepare --output "$tmp/one" --test_fraction 0.02 --max_ind_range 100000 --threads 2 \
    --no_progress "$data" >/dev/null
one=$(stat -c %s "$tmp/one/train/label.bin")
per=$(du -cb "$tmp"/one/train/*.bin | tail -n 1 | cut -f1)
reps=$(( (gb * 1000000000 + per - 1) / per ))
mkdir -p "$tmp/d/train" "$tmp/d/test"
cp "$tmp/one/feature_spec.yaml" "$tmp/d/"
cp "$tmp"/one/test/* "$tmp/d/test/"
for f in "$tmp"/one/train/*.bin; do
    for _ in $(seq "$reps"); do cat "$f"; done > "$tmp/d/train/$(basename "$f")"
done
rm -rf "$tmp/one"
split=$(du -cb "$tmp"/d/train/*.bin | tail -n 1 | cut -f1)
echo "data: $(basename "$data") prepared (--max_ind_range 100000), train files repeated ${reps}x:" \
     "$((one * reps)) samples, $(awk -v b="$split" 'BEGIN{printf "%.2f", b / 1e9}') GB"
DS=(--dataset_type split_binary --dataset_path "$tmp/d")
TINY=(--batch_size 2048 --embedding_dim 16 --bottom_mlp_dims 512,256,16 --top_mlp_dims 512,256,1
      --learning_rate 0.1 --warmup_steps 0 --evals_per_epoch 0 --log_path "" --print_freq 100000)
# one epoch for the read measurement: a model that costs little next to reading
READ=(--batch_size 2048 --embedding_dim 4 --bottom_mlp_dims 4 --top_mlp_dims 1 --learning_rate 0.1
      --warmup_steps 0 --evals_per_epoch 0 --log_path "" --print_freq 100000)

# --- 1. the producer, from the page cache ----------------------------------------------
cat "$tmp"/d/train/*.bin > /dev/null
rate=()
for t in 1 2; do
    out=$("$BIN/bench-bench_loader" "${DS[@]}" --batch_size 2048 --threads "$t" --seconds 3)
    echo "$out" | grep '^loader:' | sed "s/^loader:/producer, $t thread(s):/"
    rate+=("$(echo "$out" | sed -n 's/^result samples_per_s=\([0-9]*\) .*/\1/p')")
done

# --- 2. the consumer: training on the tiny config -------------------------------------
out=$("$BIN/terarec-worker" "${DS[@]}" "${TINY[@]}" --max_steps "$steps" --threads 2 2>&1)
train=$(echo "$out" | sed -n 's/^summary: steps=[0-9]*, throughput=\([0-9.]*\) samples\/s.*/\1/p')
step_ms=$(echo "$out" | sed -n 's/^summary: .*mean_step_time_ms=\([0-9.]*\),.*/\1/p')
echo "consumer: terarec-worker, tiny config, batch 2048, 2 threads: $train samples/s ($step_ms ms a step)"
awk -v a="${rate[0]}" -v b="${rate[1]}" -v c="$train" 'BEGIN {
    printf "producer / consumer: %.1fx with 1 thread, %.1fx with 2 (goal: at least 5)\n", a / c, b / c }'

# --- 3. read amplification ---------------------------------------------------------
# Each rank runs under a wrapper that reports the bytes its process fetched from
# storage (getrusage of the child: ru_inblock, the kernel's read_bytes / 512), after
# the page cache was dropped and the programs and libraries read back in (a
# --version run), so only the data files count.
epoch_steps=$(( (one * reps + 2047) / 2048 ))
IOW=(/usr/bin/python3 -c 'import os, resource, subprocess, sys
rc = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
r = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
open("%s/io.%s" % (sys.argv[1], r), "w").write("%d %d\n" % (resource.getrusage(resource.RUSAGE_CHILDREN).ru_inblock * 512, rc))')
if [ -w /proc/sys/vm/drop_caches ]; then
    for n in 1 4; do
        rm -f "$tmp"/io.*
        sync; echo 3 > /proc/sys/vm/drop_caches
        "$BIN/terarec-worker" --version >/dev/null; mpirun -np "$n" "$BIN/terarec-worker" --version >/dev/null 2>&1
        if [ "$n" = 1 ]; then
            "${IOW[@]}" "$tmp" "$BIN/terarec-worker" "${DS[@]}" "${READ[@]}" --max_steps "$epoch_steps" --threads 2
        else
            mpirun -np "$n" "${IOW[@]}" "$tmp" "$BIN/terarec-worker" "${DS[@]}" "${READ[@]}" \
                --max_steps "$epoch_steps" --threads 1 --columnwise_split --data_parallel_bottom_mlp
        fi
        cat "$tmp"/io.* | awk -v b="$split" -v n="$n" '{ s += $1; per = per sprintf(" %.0f", $1 / 1e6); bad += $2 != 0 }
            END { printf "read amplification, %d worker(s), one epoch: ranks read%s MB = %.0f MB / %.0f MB of train files = %.3f%s\n",
                  n, per, s / 1e6, b / 1e6, s / b, bad ? " (A RUN FAILED)" : "" }'
    done
else
    echo "read amplification: not measured (needs root to drop the page cache)"
fi

# --- 4. step time with the loader -----------------------------------------------------
# In-process and loader runs alternate (A B A B), the loader decoding on one thread
# (the worker has the node's 2 CPUs; the loader's share is what it costs).
if [ -x "$BIN/terarec-loader" ]; then
    inproc=() withl=() datams=()
    for k in 1 2; do
        out=$("$BIN/terarec-worker" "${DS[@]}" "${TINY[@]}" --max_steps "$steps" --threads 2 2>&1)
        inproc+=("$(echo "$out" | sed -n 's/^summary: .*mean_step_time_ms=\([0-9.]*\),.*/\1/p')")
        ring=lbench-$$
        OMP_WAIT_POLICY=passive "$BIN/terarec-loader" "${DS[@]}" --batch_size 2048 --ring "$ring" --loader_threads 1 \
            > "$tmp/loader.out" 2>&1 &
        lpid=$!
        out=$("$BIN/terarec-worker" "${DS[@]}" "${TINY[@]}" --max_steps "$steps" --threads 2 --loader "shm:$ring" 2>&1) ||
            { echo "error: training with terarec-loader failed:" >&2; echo "$out" | tail -n 5 >&2; kill "$lpid" 2>/dev/null; exit 1; }
        wait "$lpid" || true
        withl+=("$(echo "$out" | sed -n 's/^summary: .*mean_step_time_ms=\([0-9.]*\),.*/\1/p')")
        datams+=("$(echo "$out" | sed -n 's/^summary: .*ms\/step: data=\([0-9.]*\) .*/\1/p')")
    done
    echo "step time, tiny config, $steps steps, runs alternated: in-process reader ${inproc[*]} ms," \
         "terarec-loader ${withl[*]} ms (data phase ${datams[*]} ms)"
    awk -v a="${inproc[0]}" -v b="${inproc[1]}" -v c="${withl[0]}" -v d="${withl[1]}" 'BEGIN {
        printf "with the loader / in-process: %.3f\n", (c + d) / (a + b) }'
else
    echo "step time with terarec-loader: not measured (this build has no build/bin/terarec-loader)"
fi
