#!/usr/bin/env bash
# gpu_check.sh: the checks of terarec's CUDA backend on a machine with one GPU that
# cannot build (no compilers, no -dev packages, no network): built and packed here,
# run there in one command that fits a 10-minute call and says everything.
#
#   tools/gpu_check.sh pack [DIR]
#       here, in the repository: make, then DIR/terarec-gpu.tar.xz (DIR: .gpu, which
#       git ignores): this build's programs, CUDA plugin, test and bench programs and
#       every library they load that the GPU machine may lack (cuBLAS, cuBLASLt, NCCL,
#       the CUDA runtime and the driver are the machine's), with Open MPI and PMIx
#       relocated. Says its size and that of the tree that travels with it; fails
#       over 48 MiB together.
#   tools/gpu_check.sh run [--dry-run] [--local] [--only STAGE,...] [--out DIR]
#       there, from the repository's root (the same commit): unpacks the pack into
#       build/ unless build/ holds it already (--local: takes this checkout's own
#       build/ as it is, on a GPU machine that builds: make gpu-check), finds cuBLAS, cuBLASLt, the CUDA
#       runtime and NCCL where the plugin's RUNPATH does not (the loader's cache,
#       /usr/local/cuda*, a PyTorch wheel's nvidia/*/lib), then runs each stage in
#       order under its own budget in seconds (what a stage leaves unused goes to
#       the next; none runs past the 540 s of all of them):
#         probe     25  the device, driver, CUDA runtime, which copy of each library
#                       loaded, a python with PyTorch, compute-sanitizer
#         kernels   50  every kernel test's CUDA cases and the golden fixtures
#         t8001   110  fp32 parity with the cpu backend, 300-step AUC (fp32, bf16,
#                       fp16), device memory against the plan
#         nccl1     50  --comm nccl on a world of 1 equals the cpu backend (t8003)
#         sanitize 120  compute-sanitizer memcheck on every kernel test, racecheck on
#                       the tests of our kernels that use shared memory or warp shuffles
#         speed    185  bench/gpu_train_bench.sh: terarec fp32, tf32, --amp bf16 and
#                       fp16 against PyTorch eager and compiled, with the limits
#       --only picks stages (a rerun of those that failed), --total S caps the
#       seconds of them all (540); --dry-run walks every
#       stage and prints what it would run (works without a GPU or a pack).
#       Writes into DIR ($OUT where set, else build/gpu-check) gpu_check.txt (the
#       machine, the libraries, one line per stage: passed / failed / skipped, why,
#       seconds used; then the speed table), STAGE.log for each stage and
#       details.tar.xz (test logs, sanitizer reports, bench rows): 8 files at most.
#       Exits 1 when a stage failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
usage() { sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; }
STAGES=(probe kernels t8001 nccl1 sanitize speed)
declare -A BUDGET=([probe]=25 [kernels]=50 [t8001]=110 [nccl1]=50 [sanitize]=120 [speed]=185)
TOTAL=540
PACK_MAX=$((48 << 20))
cmd=${1:-}
[ $# -gt 0 ] && shift

# ---- pack ------------------------------------------------------------------------------------
pack() {
    local dir=${1:-.gpu}
    set -e
    make -s -j"$(nproc)" all
    [ -f build/lib/libterarec-cuda.so ] || {
        echo "gpu_check: build/lib/libterarec-cuda.so was not built (make found no nvcc)" >&2
        echo "hint: install the CUDA toolkit (nvcc) and run make again" >&2
        exit 1
    }
    local stage
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    local tests benches
    tests=$(find build/tests -type f -name 'test_*' -perm -u+x | sort)
    benches=$(find build/bin -maxdepth 1 -type f -name 'bench-*' | sort)
    BUNDLE_CUDA=0 BUNDLE_DEPS_OF="$tests $benches" tools/bundle.sh "$stage/build" \
        build/bin/terarec-worker build/bin/terarec build/bin/terarec-loader build/bin/terarec-ckpt \
        build/lib/libterarec-cuda.so
    local t
    for t in $tests; do
        mkdir -p "$stage/${t%/*}"
        cp -p "$t" "$stage/$t"
    done
    cp -p $benches "$stage/build/bin/"
    git rev-parse HEAD > "$stage/build/GPU_KIT"
    git status --porcelain --untracked-files=no | grep -q . && echo "modified" >> "$stage/build/GPU_KIT"
    mkdir -p "$dir"
    tar -C "$stage" -cJf "$dir/terarec-gpu.tar.xz.tmp" build
    mv "$dir/terarec-gpu.tar.xz.tmp" "$dir/terarec-gpu.tar.xz"
    set +e
    local size tree
    size=$(stat -c %s "$dir/terarec-gpu.tar.xz")
    # what travels beside it: tracked files and untracked ones git does not ignore
    tree=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f1)
    printf 'gpu_check: %s: %.1f MiB (commit %s%s); the tree beside it %.1f MiB; together %.1f MiB of %d\n' \
        "$dir/terarec-gpu.tar.xz" "$(echo "$size / 1048576" | bc -l)" "$(head -c 12 "$stage/build/GPU_KIT")" \
        "$(grep -q modified "$stage/build/GPU_KIT" && echo ', with uncommitted changes')" \
        "$(echo "${tree:-0} / 1048576" | bc -l)" "$(echo "($size + ${tree:-0}) / 1048576" | bc -l)" $((PACK_MAX >> 20))
    if [ $((size + ${tree:-0})) -gt $PACK_MAX ]; then
        echo "gpu_check: the pack and the tree exceed $((PACK_MAX >> 20)) MiB" >&2
        echo "hint: a call carries 64 MiB in all; leave large untracked files out of the tree" >&2
        exit 1
    fi
    case "$dir" in /*) ;; *)
        git check-ignore -q "$dir/terarec-gpu.tar.xz" ||
            echo "gpu_check: note: $dir is not ignored by git (echo /$dir/ >> .git/info/exclude)" >&2 ;;
    esac
    exit 0
}

case "$cmd" in
pack) pack "$@" ;;
run) ;;
-h|--help) usage; exit 0 ;;
*) echo "gpu_check: unknown command '$cmd'" >&2; echo "hint: tools/gpu_check.sh pack | run [--dry-run] [--local] [--only STAGE,...]" >&2; exit 2 ;;
esac

# ---- run: options ----------------------------------------------------------------------------
dry=0 local=0 only= out=${OUT:-$root/build/gpu-check}
while [ $# -gt 0 ]; do
    case "$1" in
    --dry-run) dry=1 ;;
    --local) local=1 ;;
    --total) TOTAL=${2:-}; shift ;;
    --only) only=${2:-}; shift ;;
    --only=*) only=${1#--only=} ;;
    --out) out=${2:-}; shift ;;
    --out=*) out=${1#--out=} ;;
    *) echo "gpu_check: run: unknown argument '$1'" >&2; echo "hint: run [--dry-run] [--local] [--only STAGE,...] [--total S] [--out DIR]" >&2; exit 2 ;;
    esac
    shift
done
todo=()
if [ -n "$only" ]; then
    IFS=, read -ra want <<<"$only"
    for s in "${want[@]}"; do
        [ -n "${BUDGET[$s]:-}" ] || { echo "gpu_check: --only: unknown stage '$s'" >&2; echo "hint: ${STAGES[*]}" >&2; exit 2; }
    done
    for s in "${STAGES[@]}"; do [[ ",$only," == *",$s,"* ]] && todo+=("$s"); done
else
    todo=("${STAGES[@]}")
fi
[[ $TOTAL =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check: --total '$TOTAL' is not a number of seconds" >&2; exit 2; }
[ -n "$out" ] || { echo "gpu_check: --out: empty" >&2; exit 2; }
mkdir -p "$out" || { echo "gpu_check: $out: cannot create it" >&2; exit 1; }

# x CMD...: runs CMD, or under --dry-run prints it
x() {
    if [ "$dry" = 1 ]; then echo "    would run: $*"; return 0; fi
    "$@"
}

# the toolkit's tools where PATH lacks them (compute-sanitizer)
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do
    [ -d "$d" ] && case ":$PATH:" in *":$d:"*) ;; *) PATH=$PATH:$d ;; esac
done

# ---- run: unpack and find the libraries -------------------------------------------------------
pack_file=${GPU_CHECK_PACK:-.gpu/terarec-gpu.tar.xz}
unpack() {
    if [ -f build/GPU_KIT ] && { [ ! -f "$pack_file" ] || tar -xJOf "$pack_file" build/GPU_KIT | cmp -s - build/GPU_KIT; }; then
        return 0
    fi
    [ -f "$pack_file" ] || { echo "gpu_check: $pack_file: no such file" >&2; echo "hint: tools/gpu_check.sh pack (here), carried along" >&2; return 1; }
    rm -rf build
    tar -xJf "$pack_file" || { echo "gpu_check: $pack_file: cannot unpack" >&2; return 1; }
}
plugin=build/lib/libterarec-cuda.so
# find_libs: puts folders holding the CUDA libraries the plugin misses first in
# LD_LIBRARY_PATH; says where each came from
find_libs() {
    local missing lib d found
    missing=$(ldd "$plugin" 2>/dev/null | awk '/not found/ {print $1}')
    [ -n "$missing" ] || return 0
    local cands=() s
    # the loader's cache, the toolkit's usual places, then PyTorch's wheels
    cands+=($(ldconfig -p 2>/dev/null | awk -F'=> ' '/=>/ {print $2}' | xargs -r -n1 dirname | sort -u))
    cands+=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 /usr/lib/x86_64-linux-gnu)
    for py in "$(command -v python3 2>/dev/null)" /opt/*/.venv/bin/python3; do
        [ -x "$py" ] || continue
        for s in $("$py" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
            cands+=("$s"/nvidia/*/lib "$s"/nvidia/cu*/lib)
        done
    done
    for lib in $missing; do
        found=
        for d in "${cands[@]}"; do
            if [ -e "$d/$lib" ]; then found=$d; break; fi
        done
        if [ -n "$found" ]; then
            echo "libraries: $lib: not on the plugin's RUNPATH; taken from $found"
            case ":${LD_LIBRARY_PATH:-}:" in *":$found:"*) ;; *) export LD_LIBRARY_PATH="$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
        else
            echo "libraries: $lib: not found (looked in the loader's cache, /usr/local/cuda*, PyTorch's nvidia/*/lib)"
        fi
    done
}

# ---- run: the stages -------------------------------------------------------------------------
# Each prints what it does and returns 0 (passed), 77 (skipped: its last line says
# why) or another status (failed).
stage_probe() {
    x nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm --format=csv,noheader ||
        echo "probe: nvidia-smi failed (no GPU or no driver)"
    [ "$dry" = 1 ] || nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | sed 's/^/driver /'
    local f missing=0
    echo "libraries the plugin loads:"
    if [ "$dry" = 1 ]; then
        x ldd "$plugin"
    else
        ldd "$plugin" | grep -E 'cudart|cublas|nccl|not found' | sed 's/^/   /'
        local l
        for l in $(ldd "$plugin" | awk '/cudart|cublas|nccl/ && $3 ~ /^\// {print $3}'); do
            echo "   $l -> $(readlink -f "$l")"
        done
        for f in build/bin/* "$plugin" $(find build/tests -type f -name 'test_*'); do
            if ldd "$f" 2>&1 | grep -q 'not found'; then # scripts: "not a dynamic executable"
                echo "missing libraries of $f:"; ldd "$f" | grep 'not found'; missing=1
            fi
        done
        [ $missing = 0 ] && echo "every library of the programs, tests and the CUDA plugin resolves"
    fi
    x build/bin/terarec-worker --version
    if [ "$dry" = 0 ]; then
        build/bin/terarec-worker --version --parsable | grep -q '^cuda_devices:[1-9]' || {
            echo "probe: terarec-worker sees no CUDA device: $(build/bin/terarec-worker --version 2>&1 | tail -1)"
            return 1
        }
        # the device as the backend opens it, and that a step runs
        TR_LOG=info timeout 60 build/bin/terarec-worker --backend cuda --synthetic_dataset_cardinalities 26x1000 \
            --embedding_dim 16 --bottom_mlp_dims 32,16 --top_mlp_dims 32,1 --batch_size 512 --max_steps 3 \
            --synthetic_dataset_valid_batches 1 --log_path '' 2>&1 | grep -E 'backend cuda|error|hint|summary' || return 1
    fi
    [ "$dry" = 1 ] && { echo "    would look for python3 with PyTorch, compute-sanitizer and nvcc"; return 0; }
    local py
    for py in "$(command -v python3 2>/dev/null)" /opt/*/.venv/bin/python3 /usr/bin/python3; do
        [ -x "$py" ] || continue
        # the first with PyTorch is the one the speed stage takes
        v=$("$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1)
        echo "python $py: $v"
        case "$v" in torch*) break ;; esac
    done
    if command -v compute-sanitizer >/dev/null; then
        compute-sanitizer --version | tail -n 1
    else
        echo "compute-sanitizer: not on PATH"
    fi
    command -v nvcc >/dev/null && nvcc --version | tail -n 2 | head -n 1
    return $missing
}

# the kernel tests and the argument that picks their CUDA cases (test_sort and
# test_metrics test host functions only)
kernel_tests() {
    local t all
    all=$(find build/tests/kernels build/tests/golden -type f -name 'test_*' -perm -u+x 2>/dev/null | sort)
    # a dry run without a build names them from their sources
    [ -n "$all" ] || [ "$dry" = 0 ] ||
        all=$(ls tests/kernels/test_*.c tests/golden/test_*.c | sed 's|^tests/\(.*\)\.c$|build/tests/\1|')
    for t in $all; do
        case ${t##*/} in
        test_sort|test_metrics) ;;
        test_kmath_gpu) echo "$t -" ;;
        *) echo "$t cuda" ;;
        esac
    done
}
# run_test LOG TIMEOUT PREFIX... TEST ARG: one test (ARG "-": none) into LOG; prints
# one line; fails when it fails, times out or runs no case
run_test() {
    local log=$1 limit=$2; shift 2
    # never past the stage's end (the stage's timeout does not reach this one's group)
    local left=$(( ${STAGE_END:-0} - $(date +%s) ))
    [ "${STAGE_END:-0}" -gt 0 ] && [ $left -lt "$limit" ] && limit=$(( left > 1 ? left : 1 ))
    local n=$# t0=$SECONDS rc
    local arg=${!n}
    local cmd=("${@:1:$((n - 1))}")
    [ "$arg" = - ] || cmd+=("$arg")
    TR_TEST_GPU=1 timeout -k 5 "$limit" "${cmd[@]}" > "$log" 2>&1
    rc=$?
    local summary
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$log" | tail -n 1)
    local verdict=passed
    if [ $rc -eq 124 ]; then verdict="FAILED (stopped after $limit s)"
    elif [ $rc -ne 0 ]; then verdict="FAILED (exit $rc)"
    elif ! grep -qE '^[1-9][0-9]* passed, 0 failed' <<<"$summary"; then verdict="FAILED (no case ran)"
    fi
    # one write per test: the tests run at once
    local line
    line=$(printf '  %-8s %-44s %-28s %3ds  %s' "${verdict%% *}" "${log##*/}" "${summary:-no summary line}" \
        $((SECONDS - t0)) "$([ "$verdict" = passed ] || echo "${verdict#FAILED }")")
    [ "$verdict" = passed ] || line+=$'\n'$(grep -E '^not ok|^# |Bail out|ERROR|error' "$log" | head -n 12 | sed 's/^/      /')
    echo "$line"
    [ "$verdict" = passed ]
}
export -f run_test
stage_kernels() {
    local d=build/gpu-check-logs/kernels
    x rm -rf "$d"; x mkdir -p "$d"
    local list
    list=$(kernel_tests)
    [ -n "$list" ] || { echo "kernels: no kernel tests in build/tests"; return 1; }
    if [ "$dry" = 1 ]; then
        echo "$list" | while read -r t a; do echo "    would run: TR_TEST_GPU=1 timeout 45 $t $([ "$a" = - ] || echo "$a")"; done
        return 0
    fi
    # 4 at once: each is mostly its host reference
    echo "$list" | xargs -P 4 -L 1 bash -c 'run_test "'"$d"'/${0##*/}.log" 45 "$0" "$1"'
}
stage_t8001() {
    x env TR_TEST_GPU=1 TR_TEST_VERBOSE=1 TR_TEST_ONLY='t8001' tests/run.sh build
}
stage_nccl1() {
    x env TR_TEST_GPU=1 TR_TEST_VERBOSE=1 TR_TEST_ONLY='t8003' TR_T8003_PART=gpu-world1 tests/run.sh build
}
# racecheck finds hazards on shared memory: the tests of our kernels that use it or
# warp shuffles (dense.cu's reductions in bce and sumsq, its bias backward;
# embedding.cu's update), not those of kernels with neither (fill, cross, the
# optimizers, mark_rows, the kmath probe: nothing to find) nor the cuBLASLt / CUB-heavy
# ones (whole-gemm cases, interaction, metrics, determinism)
RACECHECK='test_loss|test_sumsq|test_nonfinite|test_embedding|test_rowwise'
stage_sanitize() {
    if ! command -v compute-sanitizer >/dev/null && [ "$dry" = 0 ]; then
        echo "compute-sanitizer is not on PATH (it comes with the CUDA toolkit)"
        return 77
    fi
    local d=build/gpu-check-logs/sanitize jobs=()
    x rm -rf "$d"; x mkdir -p "$d"
    local t a
    while read -r t a; do
        jobs+=("$d/memcheck-${t##*/}.log 90 compute-sanitizer --tool memcheck --error-exitcode 99 $t $a")
        [[ ${t##*/} =~ ^($RACECHECK)$ ]] &&
            jobs+=("$d/racecheck-${t##*/}.log 90 compute-sanitizer --tool racecheck --error-exitcode 99 $t $a")
        [ "${t##*/}" = test_dense ] &&
            jobs+=("$d/racecheck-test_dense-bias_act.log 90 compute-sanitizer --tool racecheck --error-exitcode 99 $t bias_act_")
    done < <(kernel_tests)
    if [ "$dry" = 1 ]; then
        printf '    would run: %s\n' "${jobs[@]#* * }"
        return 0
    fi
    # 6 at once; every report is kept, none stops the others
    printf '%s\n' "${jobs[@]}" | xargs -P 6 -L 1 bash -c 'log=$0 lim=$1; shift; run_test "$log" "$lim" "$@"'
}
stage_speed() {
    x bench/gpu_train_bench.sh --budget $(( ${limit:-185} - 10 )) --out build/gpu-check-logs/bench
}

# ---- run: the driver -------------------------------------------------------------------------
if [ "$dry" = 1 ]; then
    echo "gpu_check: dry run: what \`tools/gpu_check.sh run\` would do, stage by stage (budgets in seconds, $TOTAL in all)"
elif [ "$local" = 1 ]; then
    [ -x build/bin/terarec-worker ] && [ -f "$plugin" ] ||
        { echo "gpu_check: --local: build/ holds no CUDA build" >&2; echo "hint: make (with nvcc on PATH)" >&2; exit 1; }
    echo "local build" > "$out/.kit"
else
    unpack || exit 1
    [ -f build/GPU_KIT ] || { echo "gpu_check: build/ holds no pack (build/GPU_KIT missing)" >&2; exit 1; }
    head=$(git rev-parse HEAD 2>/dev/null || echo unknown)
    [ "$(head -n 1 build/GPU_KIT)" = "$head" ] ||
        echo "gpu_check: warning: the pack was built at $(head -c 12 build/GPU_KIT), this checkout is at ${head:0:12}" >&2
    echo "$(head -c 12 build/GPU_KIT)$(grep -q modified build/GPU_KIT && echo ' (with uncommitted changes)')" > "$out/.kit"
    # the pack's libraries and Open MPI's relocation (env.sh), then the machine's CUDA libraries
    [ -f build/env.sh ] && . build/env.sh
    export LD_LIBRARY_PATH="$root/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    find_libs > "$out/.libs" 2>&1 # (in this shell: its LD_LIBRARY_PATH holds for the stages)
    rm -rf build/gpu-check-logs
    mkdir -p build/gpu-check-logs
fi
summary=$out/gpu_check.txt
{
    echo "terarec GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    if [ "$dry" = 0 ]; then
        echo "programs: $(cat "$out/.kit"); the checkout's git HEAD: $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
        echo "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null | head -n 1 || echo 'none (nvidia-smi failed)')"
        echo "driver: $(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -n 1)"
        for l in $(ldd "$plugin" 2>/dev/null | awk '/cudart|cublas|nccl/ && $3 ~ /^\// {print $3}'); do
            echo "library: $(readlink -f "$l")"
        done
        ldd "$plugin" 2>/dev/null | grep 'not found' | sed 's/^[[:space:]]*/library: /'
        cat "$out/.libs" 2>/dev/null
    fi
} > "$summary"
rm -f "$out/.libs" "$out/.kit"

deadline=$(( $(date +%s) + TOTAL ))
carry=0
failed=()
for s in "${todo[@]}"; do
    limit=$(( BUDGET[$s] + carry ))
    left=$(( deadline - $(date +%s) ))
    [ $limit -gt $left ] && limit=$left
    if [ "$dry" = 1 ]; then
        echo "stage $s: budget ${BUDGET[$s]} s"
        limit=${BUDGET[$s]} stage_"$s"
        continue
    fi
    t0=$(date +%s)
    if [ $limit -lt 5 ]; then
        printf '%-9s skipped  0 s of %d  (no time left of the %d s)\n' "$s" "${BUDGET[$s]}" $TOTAL >> "$summary"
        continue
    fi
    echo "=== gpu_check: $s (budget $limit s, $(date -u +%H:%M:%S))"
    # a stage runs in a child under timeout, so that a hung GPU run leaves the others their time
    export -f stage_"$s" x kernel_tests find_libs
    export dry plugin RACECHECK limit STAGE_END=$(( t0 + limit ))
    timeout -k 10 "$limit" bash -c "stage_$s" > "$out/$s.log" 2>&1
    rc=$?
    # what a stopped stage left running (its tests' own timeouts run in groups of their own)
    pkill -KILL -f -- "compute-sanitizer|$root/build/|^build/|torch_dlrm_gpu.py" 2>/dev/null
    used=$(( $(date +%s) - t0 ))
    case $rc in
    0) verdict=passed why= ;;
    77) verdict=skipped why=$(grep -v '^$' "$out/$s.log" | tail -n 1) ;;
    124|137) verdict=failed why="stopped at its budget of $limit s" ;;
    *) verdict=failed why="exit $rc; see $s.log" ;;
    esac
    [ "$verdict" = failed ] && failed+=("$s")
    # the stage's own one-line verdicts, when it has them
    [ "$s" = t8001 ] || [ "$s" = nccl1 ] &&
        why="${why:+$why; }$(grep -E '^(ok|FAIL) ' "$out/$s.log" | head -n 1 | sed 's/  */ /g')"
    printf '%-9s %-8s %3d s of %3d  %s\n' "$s" "$verdict" "$used" "${BUDGET[$s]}" "$why" | tee -a "$summary"
    [ "$verdict" = failed ] && grep -E 'FAILED|not ok|error|failed' "$out/$s.log" | head -n 8 | sed 's/^/    /'
    carry=$(( limit - used > 0 ? limit - used : 0 ))
done
[ "$dry" = 1 ] && exit 0

# the speed table under the stage lines, and every stage's files in one archive
if [ -f "$out/speed.log" ] && grep -q '^device: ' "$out/speed.log"; then
    { echo; sed -n '/^device: /,$p' "$out/speed.log"; } >> "$summary"
fi
[ -d build/gpu-check-logs ] && tar -C build -cJf "$out/details.tar.xz" gpu-check-logs test-logs 2>/dev/null
echo
cat "$summary"
[ ${#failed[@]} -eq 0 ] || { echo "gpu_check: failed: ${failed[*]}"; exit 1; }
echo "gpu_check: every stage run passed or was skipped: ${todo[*]}"
