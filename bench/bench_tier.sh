#!/usr/bin/env bash
# bench_tier.sh [--smoke] [--dir DIR] [--cache SIZE] [--steps N] [--rows N] [--mem_rows N]: tables
# larger than memory through --table_store file:DIR. The full run (the default; for
# the lead, on a quiet machine): 26 tables x 28 M rows x dim 16, power-law ids like
# Criteo's, SGD: 43.4 GiB of rows, about 2x this machine's 24 GiB, in files under
# DIR with a 4 GiB cache, against the same model with its tables scaled to fit in
# memory (26 x 2.8 M rows) and that scaled model through a file store too, with
# the same fraction of its rows cached (the store's own cost on the same rows). It prints, for each run, samples/s over the warm
# steps (and the ratio to the in-memory run), the cache's hit rate, the rows and
# bytes read and written per batch, the step's time in the tier (making its batch
# resident and starting the next one's fetch: what the look-ahead did not hide)
# and of that the wait for the I/O threads. --smoke: 26 x 2.8 M rows (4.3 GiB of
# files) with a 256 MiB cache against 26 x 280 K in memory, 40 steps, a few
# minutes. A benchmark, not a test: it asserts nothing about speed; it checks the
# free disk first (df) and leaves no file behind (the store unlinks its files when
# it opens them). TR_BUILD picks the build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
W=${TR_BUILD:-$root/build}/bin/terarec-worker
dir=${TMPDIR:-/tmp} cache=4G steps=200 rows=28000000 mem_rows=2800000 smoke=0
while [ $# -gt 0 ]; do
    case "$1" in
    --smoke) smoke=1; shift ;;
    --dir) dir=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rows) rows=$2; shift 2 ;;
    --mem_rows) mem_rows=$2; shift 2 ;;
    *) echo "bench_tier.sh: unknown argument $1" >&2
       echo "hint: --smoke, --dir DIR, --cache SIZE, --steps N, --rows N, --mem_rows N" >&2; exit 2 ;;
    esac
done
if [ $smoke = 1 ]; then
    rows=2800000 mem_rows=280000 cache=256M steps=40
fi
[ -x "$W" ] || make -C "$root" -s -j2 >/dev/null
T=26 D=16 B=65536
warm=$((steps / 4))
file_bytes=$((T * rows * D * 4))
free=$(df -B1 --output=avail "$dir" | tail -n 1 | tr -d ' ')
if [ "$free" -lt $((file_bytes + file_bytes / 10 + (1 << 30))) ]; then
    echo "bench_tier.sh: $dir has $((free >> 30)) GiB free; the files need $((file_bytes >> 30)) GiB" >&2
    echo "hint: --dir DIR on a disk with room, or --rows N for smaller tables" >&2
    exit 2
fi
store=$(mktemp -d "$dir/terarec-bench-tier.XXXXXX")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$store"' EXIT
MODEL="--batch_size $B --embedding_dim $D --bottom_mlp_dims 64,$D --top_mlp_dims 128,64,1 --learning_rate 0.1
       --warmup_steps 0 --max_steps $steps --print_freq $steps --benchmark_warmup_steps $warm
       --synthetic_dataset_valid_batches 0 --synthetic_dataset_train_batches 100000 --synthetic_ids powerlaw"
echo "model: $T tables x $rows rows (in memory: x $mem_rows), dim $D, bottom 64,$D, top 128,64,1, SGD, batch $B," \
    "power-law ids; $steps steps, the first $warm left out of samples/s"
echo "machine: $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB of memory; store under $dir" \
    "($((free >> 30)) GiB free, $((file_bytes >> 30)) GiB of files)"
run() { # NAME ROWS EXTRA...: a failed run shows the end of its output
    local name=$1 r=$2 rc=0
    shift 2
    echo "running $name ..." >&2
    /usr/bin/env time -f "%M" -o "$tmp/$name.rss" $W $MODEL --synthetic_dataset_cardinalities "${T}x$r" "$@" \
        --log_path "$tmp/$name.json" >"$tmp/$name.out" 2>&1 || rc=$?
    [ $rc -eq 0 ] || { echo "bench_tier.sh: run $name failed (exit $rc):" >&2; tail -n 15 "$tmp/$name.out" >&2; exit 1; }
}
run memory "$mem_rows"
# the scaled model's cache: the same fraction of its rows as the full model's
run file-scaled "$mem_rows" --table_store "file:$store" --embedding_cache "$(python3 -c "
import sys; print('%.6f' % min(1.0, float(sys.argv[1]) / float(sys.argv[2])))" "$(numfmt --from=iec "$cache")" "$file_bytes")"
run file "$rows" --table_store "file:$store" --embedding_cache "$cache"
python3 - "$tmp" <<'PYEOF'
import json, os, sys
tmp = sys.argv[1]
def final(name):
    recs = [json.loads(l[5:]) for l in open(os.path.join(tmp, name + ".json")) if l.startswith("DLLL ")]
    return [r["data"] for r in recs if "throughput" in r.get("data", {})][-1]
base = final("memory")["throughput"]
print("%-12s %11s %7s %9s %10s %10s %11s %11s %9s %9s %9s" % (
    "run", "samples/s", "ratio", "hit rate", "rows rd", "rows wr", "MiB rd", "MiB wr", "tier ms", "io wait",
    "max RSS"))
for name in ("memory", "file-scaled", "file"):
    d = final(name)
    ts = d.get("table_store", {})
    rss = int(open(os.path.join(tmp, name + ".rss")).read().split()[-1]) / 1024.0
    if ts:
        print("%-12s %11.0f %7.3f %9.4f %10.0f %10.0f %11.2f %11.2f %9.2f %9.2f %8.0fM" % (
            name, d["throughput"], d["throughput"] / base, ts["hit_rate"], ts["rows_read_per_batch"],
            ts["rows_written_per_batch"], ts["bytes_read_per_batch"] / 2**20, ts["bytes_written_per_batch"] / 2**20,
            d["phase_ms_per_step"]["tier"], ts["wait_ms_per_batch"], rss))
    else:
        print("%-12s %11.0f %7.3f %9s %10s %10s %11s %11s %9s %9s %8.0fM" % (
            name, d["throughput"], 1.0, "-", "-", "-", "-", "-", "-", "-", rss))
print("rows rd/wr, MiB rd/wr and io wait: per batch over the whole run (reads count rows computed, never written,")
print("too; MiB are what pread and pwrite moved); tier ms: per warm step, the step's time making its batch")
print("resident and starting the next one's fetch; io wait: the part of it waiting for the I/O threads")
PYEOF
