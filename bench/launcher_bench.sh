#!/usr/bin/env bash
# launcher_bench.sh [RUNS]: what `terarec train` costs over the workers alone (issue 12).
# The same job (the built-in demo model: 26 tables of 100,000 rows, dim 16, batch
# 2048, 300 steps) run RUNS times (default 3) each way, alternating:
#   reference: mpirun -np 2 terarec-worker (rank 0 reads the data, no checkpoint)
#   launcher:  terarec train --workers 2 (the store, the loader, reports to SQLite,
#              and the final checkpoint the launcher always takes)
# and prints the median wall time and samples/s (the workers' own figure) of each,
# and their ratios. Needs a built tree (make).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TR_BIN:-$root/build/bin}
runs=${1:-3}
dir=$(mktemp -d /tmp/launcher-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT
export OMPI_MCA_rmaps_base_oversubscribe=1
[ "$(id -u)" -eq 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
M="--batch_size 2048 --synthetic_dataset_cardinalities 26x100000 --embedding_dim 16 --bottom_mlp_dims 64,16
   --top_mlp_dims 64,1 --learning_rate 1 --warmup_steps 20 --max_steps 300 --print_freq 50
   --synthetic_dataset_valid_batches 10 --threads 1"
now() { date +%s.%N; }
median() { sort -g | awk '{v[NR]=$1} END{print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
: >"$dir/ref.t"; : >"$dir/ref.r"; : >"$dir/lau.t"; : >"$dir/lau.r"
for i in $(seq 1 "$runs"); do
    t0=$(now)
    # shellcheck disable=SC2086
    mpirun -np 2 --bind-to none "$BIN/terarec-worker" $M --log_path "$dir/ref.json" >"$dir/ref.out" 2>&1
    t1=$(now)
    awk -v a="$t0" -v b="$t1" 'BEGIN{print b - a}' >>"$dir/ref.t"
    sed -n 's/.*"throughput": *\([0-9.e+]*\).*/\1/p' "$dir/ref.json" | tail -n 1 >>"$dir/ref.r"
    t0=$(now)
    # shellcheck disable=SC2086
    "$BIN/terarec" train --db "$dir/runs.db" --workers 2 $M >"$dir/lau.out" 2>&1
    t1=$(now)
    awk -v a="$t0" -v b="$t1" 'BEGIN{print b - a}' >>"$dir/lau.t"
    python3 - "$dir/runs.db" >>"$dir/lau.r" <<'PY'
import json, sqlite3, sys
c = sqlite3.connect(sys.argv[1])
print(json.loads(c.execute("select final_metrics from runs order by start_time desc limit 1").fetchone()[0])["throughput"])
PY
done
rt=$(median <"$dir/ref.t") lt=$(median <"$dir/lau.t") rr=$(median <"$dir/ref.r") lr=$(median <"$dir/lau.r")
echo "launcher_bench: $(nproc) CPUs, $runs runs each, 2 workers, 300 steps of 2048 (demo model)"
printf 'reference (mpirun terarec-worker): wall %.2f s, %.0f samples/s\n' "$rt" "$rr"
printf 'terarec train:                     wall %.2f s, %.0f samples/s\n' "$lt" "$lr"
awk -v a="$lt" -v b="$rt" 'BEGIN{printf "ratio wall time launcher/reference: %.3f\n", a / b}'
awk -v a="$lr" -v b="$rr" 'BEGIN{printf "ratio samples/s launcher/reference: %.3f\n", a / b}'
