#!/usr/bin/env bash
# ckpt_bench.sh [DIR]: checkpoint speed (issue 11), each figure against a reference
# measured in the same run, on the disk holding DIR (default: a folder under /tmp):
#   1. save and restore GB/s of a 2.1 GB model (4 tables of 4,194,304 rows x 32,
#      SGD) through a local path and through terarec-ckpt on loopback, against dd
#      writing (conv=fsync) and reading the same number of bytes on the same disk;
#      the page cache is dropped before each read when this user may
#      (/proc/sys/vm/drop_caches), and the report says whether it was;
#   2. the training stall of async saves every 50 steps as a share of the training
#      time (tiny config: 26 tables of 100,000 rows, dim 16, Adagrad, 500 steps),
#      and the same with synchronous saves for contrast;
#   3. bytes an incremental save hashes and sends vs a full save, 100 steps of
#      power-law ids after a full save (tiny config), for three chunk sizes.
# Needs a built tree (make); prints "ratio" lines. Takes a few minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TR_BIN:-$root/build/bin}
dir=${1:-$(mktemp -d /tmp/ckpt-bench.XXXXXX)}
mkdir -p "$dir"
W=$BIN/terarec-worker
S=$BIN/terarec-ckpt
srv_pid=""
cleanup() { [ -n "$srv_pid" ] && kill "$srv_pid" 2>/dev/null; rm -rf "$dir"/store-* "$dir"/dd.bin "$dir"/srv.*; }
trap cleanup EXIT
printf 'bench-%s\n' "$RANDOM$RANDOM" >"$dir/token"

drop_caches() {
    sync
    if [ -w /proc/sys/vm/drop_caches ]; then
        echo 3 >/proc/sys/vm/drop_caches
        echo dropped
    else
        echo warm
    fi
}
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", b - a}'; }
now() { date +%s.%N; }
gbps() { awk -v b="$1" -v s="$2" 'BEGIN{printf "%.3f", b / s / 1e9}'; }

echo "ckpt_bench: $(nproc) CPUs, disk of $dir: $(df -h "$dir" | awk 'NR==2{print $1", "$2" total, "$4" free"}')"

# ---- 1. save and restore of a 2.1 GB model ---------------------------------------------
BIG=(--batch_size 1024 --synthetic_dataset_cardinalities 4x4194304 --embedding_dim 32 --bottom_mlp_dims 64,32
     --top_mlp_dims 64,1 --optimizer sgd --learning_rate 0.1 --warmup_steps 0 --max_steps 1 --print_freq 1
     --synthetic_dataset_valid_batches 0 --log_path "" --threads 2 --checkpoint_chunk_bytes 4M)
bytes=$((4 * 4194304 * 32 * 4))
# dd: the same bytes to the same disk, then back
t0=$(now)
dd if=/dev/zero of="$dir/dd.bin" bs=4M count=$((bytes / 4194304)) conv=fsync status=none
t1=$(now)
dd_w=$(gbps $bytes "$(secs "$t0" "$t1")")
cache=$(drop_caches)
t0=$(now)
dd if="$dir/dd.bin" of=/dev/null bs=4M status=none
t1=$(now)
dd_r=$(gbps $bytes "$(secs "$t0" "$t1")")
rm -f "$dir/dd.bin"
echo "dd: write $dd_w GB/s (conv=fsync), read $dd_r GB/s (page cache $cache), $bytes bytes"

one_store() { # NAME WHERE EXTRA...: saves the big model, restores it; prints the two rates
    local name=$1 where=$2; shift 2
    local out save_s snap_ms rd_mib rd_s
    out=$("$W" "${BIG[@]}" --checkpoint_dir "$where" --run_name big "$@" 2>&1) || { echo "$out" | tail -n 5; exit 1; }
    save_s=$(echo "$out" | sed -n 's/^checkpoint: step 1 committed .*; \([0-9.]*\) s$/\1/p')
    snap_ms=$(echo "$out" | sed -n 's/^checkpoint: step 1: full snapshot of .* in \([0-9.]*\) ms; .*/\1/p')
    local cache2
    cache2=$(drop_caches)
    out=$("$W" "${BIG[@]}" --restore "$where#big" "$@" 2>&1) || { echo "$out" | tail -n 5; exit 1; }
    rd_mib=$(echo "$out" | sed -n 's/.*this rank read \([0-9.]*\) MiB in \([0-9.]*\) s.*/\1/p')
    rd_s=$(echo "$out" | sed -n 's/.*this rank read \([0-9.]*\) MiB in \([0-9.]*\) s.*/\2/p')
    local sv rs
    sv=$(awk -v b=$bytes -v s="$save_s" -v m="$snap_ms" 'BEGIN{printf "%.3f", b / (s + m / 1e3) / 1e9}')
    rs=$(awk -v m="$rd_mib" -v s="$rd_s" 'BEGIN{printf "%.3f", m * 1048576 / s / 1e9}')
    echo "$name: save $sv GB/s (snapshot ${snap_ms} ms + background ${save_s} s), restore $rs GB/s ($rd_mib MiB in $rd_s s, page cache $cache2)"
    echo "ratio $name save / dd write = $(awk -v a="$sv" -v b="$dd_w" 'BEGIN{printf "%.2f", a / b}')"
    echo "ratio $name restore / dd read = $(awk -v a="$rs" -v b="$dd_r" 'BEGIN{printf "%.2f", a / b}')"
}
one_store "local path" "$dir/store-local"
"$S" --root "$dir/store-http" --token_file "$dir/token" >"$dir/srv.out" 2>"$dir/srv.err" &
srv_pid=$!
url=""
for _ in $(seq 200); do
    url=$(sed -n 's/^terarec-ckpt: listening on //p' "$dir/srv.out")
    [ -n "$url" ] && break
    sleep 0.05
done
[ -n "$url" ] || { echo "terarec-ckpt did not start: $(cat "$dir/srv.err")"; exit 1; }
one_store "http (terarec-ckpt on loopback)" "$url" --checkpoint_token_file "$dir/token"
kill "$srv_pid"
srv_pid=""
rm -rf "$dir"/store-*

# ---- 2. the stall of async saves every 50 steps ----------------------------------------
TINY=(--batch_size 2048 --synthetic_dataset_cardinalities 26x100000 --embedding_dim 16 --bottom_mlp_dims 512,256,16
      --top_mlp_dims 512,256,1 --optimizer adagrad --learning_rate 0.1 --warmup_steps 0 --print_freq 100000
      --synthetic_dataset_valid_batches 0 --log_path "" --threads 2 --benchmark_warmup_steps 0)
# the reference: the same 500 steps without checkpoints
base_out=$("$W" "${TINY[@]}" --max_steps 500 2>&1) || { echo "$base_out" | tail -n 5; exit 1; }
base_ms=$(echo "$base_out" | sed -n 's/^summary: .*mean_step_time_ms=\([0-9.]*\).*/\1/p')
echo "no checkpoints: 500 steps at $base_ms ms/step"
stall() { # NAME EXTRA...: trains 500 steps saving every 50; prints the stall share
    local name=$1; shift
    local out step_ms paused_ms
    out=$("$W" "${TINY[@]}" --max_steps 500 --checkpoint_dir "$dir/store-stall-$name" --run_name s \
        --checkpoint_every 50 "$@" 2>&1) || { echo "$out" | tail -n 5; exit 1; }
    step_ms=$(echo "$out" | sed -n 's/^summary: .*mean_step_time_ms=\([0-9.]*\).*/\1/p')
    paused_ms=$(echo "$out" | sed -n 's/^checkpoint: \([0-9]*\) saves; training paused \([0-9.]*\) ms in all.*/\2/p')
    echo "$name: 500 steps at $step_ms ms/step while saving, training paused $paused_ms ms in all over 10 saves"
    echo "ratio stall share ($name) = paused / training time = $(awk -v p="$paused_ms" -v t="$step_ms" \
        'BEGIN{printf "%.4f", p / (p + t * 500)}')"
    echo "ratio overhead ($name) = (training time + paused) / no-checkpoint time - 1 = $(awk -v p="$paused_ms" \
        -v t="$step_ms" -v b="$base_ms" 'BEGIN{printf "%.4f", (p + t * 500) / (b * 500) - 1}')"
}
stall async
stall sync --no_checkpoint_async
rm -rf "$dir"/store-*

# ---- 3. incremental vs full bytes --------------------------------------------------------
for cb in 64K 256K 1M; do
    out=$("$W" "${TINY[@]}" --max_steps 200 --checkpoint_dir "$dir/store-inc-$cb" --run_name i \
        --checkpoint_every 100 --checkpoint_chunk_bytes "$cb" 2>&1) || { echo "$out" | tail -n 5; exit 1; }
    line=$(echo "$out" | grep '^checkpoint: step 200 committed')
    hashed=$(echo "$line" | sed -n 's/.*hashed \([0-9.]*\) MiB and sent \([0-9.]*\) MiB.*names [0-9]* chunks, \([0-9.]*\) MiB.*/\1/p')
    sent=$(echo "$line" | sed -n 's/.*hashed \([0-9.]*\) MiB and sent \([0-9.]*\) MiB.*names [0-9]* chunks, \([0-9.]*\) MiB.*/\2/p')
    full=$(echo "$line" | sed -n 's/.*hashed \([0-9.]*\) MiB and sent \([0-9.]*\) MiB.*names [0-9]* chunks, \([0-9.]*\) MiB.*/\3/p')
    echo "chunks of $cb: after 100 steps the incremental save hashed $hashed MiB and sent $sent MiB; a full save is $full MiB"
    echo "ratio incremental / full bytes sent (chunks $cb) = $(awk -v a="$sent" -v b="$full" 'BEGIN{printf "%.3f", a / b}')"
    rm -rf "$dir/store-inc-$cb"
done
