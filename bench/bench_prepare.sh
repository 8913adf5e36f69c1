#!/usr/bin/env bash
# bench_prepare.sh: throughput of `terarec data prepare` in hash and threshold mode,
# with 1 and 2 threads, on the real Criteo sample files concatenated REPEAT times
# into one temporary TSV under $TMPDIR (default /tmp; removed at exit), as MB/s of
# TSV (1 MB = 10^6 bytes): wall-clock MB/s, MB/s per thread (wall / --threads) and
# MB/s per CPU-second (user + sys of all threads, reader and writer included).
# Best of RUNS runs. Skips with a notice when the data folder is absent.
#
#   bench/bench_prepare.sh            (env: REPEAT=12 RUNS=2 THREADS="1 2" BUILD=build
#                                      TR_CRITEO_SAMPLE=<dir of kaggle_*.tsv>)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
T=$root/${BUILD:-build}/bin/terarec
DATA=${TR_CRITEO_SAMPLE:-$root/../shared/data/criteo_sample}
REPEAT=${REPEAT:-12}
RUNS=${RUNS:-2}
THREADS=${THREADS:-1 2}
srcs=()
for f in kaggle_train_random_0p3pct.tsv kaggle_train_first100k_subset.tsv kaggle_train_misc_small.tsv; do
    [ -r "$DATA/$f" ] && srcs+=("$DATA/$f")
done
if [ ${#srcs[@]} -eq 0 ]; then
    echo "bench_prepare: SKIP: no Criteo sample in $DATA (set TR_CRITEO_SAMPLE)"
    exit 0
fi
[ -x "$T" ] || { echo "bench_prepare: $T not built (run make)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-prepare.XXXXXX")
trap 'rm -rf "$work"' EXIT
for _ in $(seq "$REPEAT"); do cat "${srcs[@]}"; done >"$work/in.tsv"
bytes=$(stat -c %s "$work/in.tsv")
cat "$work/in.tsv" >/dev/null # into the page cache: measure parsing, not the disk
echo "input: $bytes bytes of TSV ($(wc -l <"$work/in.tsv") rows: ${#srcs[@]} sample files x $REPEAT), $(nproc) CPUs"
printf '%-34s %7s %9s %11s %13s\n' mode threads "wall MB/s" "MB/s/thread" "MB/s/CPU-sec"
for mode in "hash --max_ind_range 40000000 --no_shuffle" "hash --max_ind_range 40000000" \
            "threshold --frequency_threshold 15 --no_shuffle" "threshold --frequency_threshold 15"; do
    set -- $mode
    name=$1
    shift
    case "$*" in *no_shuffle*) name="$name, no shuffle" ;; *) name="$name, shuffled train" ;; esac
    for t in $THREADS; do
        best_wall=0 best_cpu=0
        for _ in $(seq "$RUNS"); do
            rm -rf "$work/out"
            /usr/bin/time -o "$work/time" -f '%e %U %S' "$T" data prepare --output "$work/out" --test_fraction 0.1 \
                --threads "$t" --no_progress "$@" "$work/in.tsv" >/dev/null 2>"$work/err" \
                || { echo "run failed: $(cat "$work/err")"; exit 1; }
            read -r wall user sys <"$work/time"
            w=$(awk -v b="$bytes" -v s="$wall" 'BEGIN { printf "%.1f", b / 1e6 / s }')
            c=$(awk -v b="$bytes" -v u="$user" -v s="$sys" 'BEGIN { printf "%.1f", b / 1e6 / (u + s) }')
            awk -v a="$w" -v b="$best_wall" 'BEGIN { exit !(a > b) }' && best_wall=$w
            awk -v a="$c" -v b="$best_cpu" 'BEGIN { exit !(a > b) }' && best_cpu=$c
        done
        per=$(awk -v w="$best_wall" -v t="$t" 'BEGIN { printf "%.1f", w / t }')
        printf '%-34s %7d %9s %11s %13s\n' "$name" "$t" "$best_wall" "$per" "$best_cpu"
    done
done
echo "command: terarec data prepare --output OUT --test_fraction 0.1 --threads N <mode flags> in.tsv"
