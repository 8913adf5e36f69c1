#!/usr/bin/env bash
# gpu_kit.sh: the GPU checks (make test-gpu, make sanitize-cuda, the GPU benches) on a
# GPU machine that lacks the build's -dev packages and cannot build (a GPU node of a
# cluster, a lent machine), in few calls: build and pack here, unpack and run there.
#
#   tools/gpu_kit.sh pack [DIR]        here, in the repository: make, then
#       DIR/terarec-gpu.tar.xz (DIR: .gpu): this build's programs, CUDA plugin, test
#       and bench programs, and every library they load that the GPU machine may lack
#       (make bundle's: the CUDA toolkit's, the C runtime and the driver are left to
#       the machine), with Open MPI and PMIx relocated; laid out as build/.
#   tools/gpu_kit.sh run [STAGE...]    there, from the repository's root (a copy of the
#       same commit): unpacks DIR/terarec-gpu.tar.xz into build/ unless build/ holds
#       that pack already, then runs each STAGE (default: probe tests sanitize):
#         probe     the GPU (nvidia-smi), every library resolves (ldd), --version
#         tests     tests/run.sh with TR_TEST_GPU=1 (a GPU test that cannot run
#                   fails), 4 tests at once (TR_TEST_JOBS); TR_TEST_ONLY picks
#                   tests as in tests/run.sh
#         sanitize  compute-sanitizer memcheck and racecheck on every kernel test's
#                   CUDA cases (tools/sanitize_cuda.sh, what make sanitize-cuda runs)
#         bench     bench/gpu_train_bench.sh, then bench/bench_hybrid.sh --backend
#                   cuda with --comm mpi, and --comm nccl where 2 GPUs are
#       Each stage's output goes to stdout and to OUT/STAGE.log (OUT: $OUT where set,
#       else build/gpu-kit); the stage's files (test logs, bench tables) to
#       OUT/STAGE-files.tar.xz. Exits 1 when a stage failed, after running the others.
#       GPU_KIT_BUDGET (seconds, default 560) bounds the whole run, so that it ends
#       with its logs inside a call that allows 600 s: each stage gets what is left
#       of it, and a stage that would get under 30 s is not started.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; }
cmd=${1:-}
[ $# -gt 0 ] && shift

case "$cmd" in
pack)
    dir=${1:-.gpu}
    set -e
    make -s -j"$(nproc)" all
    # what CUDA detection built (a build without nvcc packs nothing worth running)
    [ -f build/lib/libterarec-cuda.so ] || {
        echo "gpu_kit: build/lib/libterarec-cuda.so was not built (no nvcc found by make)" >&2
        echo "hint: install the CUDA toolkit (nvcc) and run make again" >&2
        exit 1
    }
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    tests=$(find build/tests -type f -name 'test_*' -perm -u+x | sort)
    benches=$(find build/bin -maxdepth 1 -type f -name 'bench-*' | sort)
    # make bundle's folder, plus the libraries of the test and bench programs
    BUNDLE_CUDA=0 BUNDLE_DEPS_OF="$tests $benches" tools/bundle.sh "$stage/build" \
        build/bin/terarec-worker build/bin/terarec build/bin/terarec-loader build/bin/terarec-ckpt \
        build/lib/libterarec-cuda.so
    for t in $tests; do
        mkdir -p "$stage/${t%/*}"
        cp -p "$t" "$stage/$t"
    done
    cp -p $benches "$stage/build/bin/"
    git rev-parse HEAD > "$stage/build/GPU_KIT"
    mkdir -p "$dir"
    tar -C "$stage" -cJf "$dir/terarec-gpu.tar.xz.tmp" build
    mv "$dir/terarec-gpu.tar.xz.tmp" "$dir/terarec-gpu.tar.xz"
    echo "gpu_kit: $dir/terarec-gpu.tar.xz ($(du -h "$dir/terarec-gpu.tar.xz" | cut -f1), commit $(cut -c1-12 "$stage/build/GPU_KIT"))"
    case "$dir" in /*) ;; *)
        git check-ignore -q "$dir/terarec-gpu.tar.xz" ||
            echo "gpu_kit: note: $dir is not ignored by git (echo /$dir/ >> .git/info/exclude)" >&2 ;;
    esac
    exit 0 ;;
run) ;;
-h|--help) usage; exit 0 ;;
*) echo "gpu_kit: unknown command '$cmd'" >&2; echo "hint: tools/gpu_kit.sh pack | run [probe|tests|sanitize|bench]..." >&2; exit 2 ;;
esac

# ---- run -------------------------------------------------------------------------------------
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(probe tests sanitize)
for s in "${stages[@]}"; do
    case "$s" in probe|tests|sanitize|bench) ;; *)
        echo "gpu_kit: unknown stage '$s'" >&2; echo "hint: probe, tests, sanitize or bench" >&2; exit 2 ;;
    esac
done
pack=${GPU_KIT_PACK:-.gpu/terarec-gpu.tar.xz}
if [ ! -f build/GPU_KIT ] || { [ -f "$pack" ] && ! tar -xJOf "$pack" build/GPU_KIT | cmp -s - build/GPU_KIT; }; then
    [ -f "$pack" ] || { echo "gpu_kit: $pack: no such file" >&2; echo "hint: tools/gpu_kit.sh pack (here), carried along" >&2; exit 1; }
    rm -rf build
    tar -xJf "$pack" || { echo "gpu_kit: $pack: cannot unpack" >&2; exit 1; }
fi
head=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[ "$(cat build/GPU_KIT)" = "$head" ] ||
    echo "gpu_kit: warning: the pack was built at $(cut -c1-12 build/GPU_KIT), this checkout is at ${head:0:12}" >&2
out=${OUT:-$root/build/gpu-kit}
mkdir -p "$out"
# the pack's libraries first (the test programs' RUNPATH names the build machine's
# paths), its mpirun and Open MPI's relocation (env.sh), the machine's CUDA libraries
[ -f build/env.sh ] && . build/env.sh
export LD_LIBRARY_PATH="$root/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
deadline=$(( $(date +%s) + ${GPU_KIT_BUDGET:-560} ))

probe() {
    nvidia-smi -L || echo "gpu_kit: nvidia-smi failed (no GPU or no driver)"
    local f missing=0
    for f in build/bin/* build/lib/libterarec-cuda.so $(find build/tests -type f -name 'test_*'); do
        if ldd "$f" 2>&1 | grep -q 'not found'; then # (scripts: "not a dynamic executable")
            echo "missing libraries of $f:"; ldd "$f" | grep 'not found'; missing=1
        fi
    done
    [ $missing = 0 ] && echo "every library of the programs, tests and the CUDA plugin resolves"
    build/bin/terarec-worker --version
    build/bin/terarec-worker --version --parsable | grep -q '^cuda_devices:[1-9]' || {
        echo "gpu_kit: terarec-worker sees no CUDA device"; return 1; }
    command -v compute-sanitizer >/dev/null && compute-sanitizer --version | tail -1
    return $missing
}
tests() {
    TR_TEST_GPU=${TR_TEST_GPU:-1} TR_TEST_JOBS=${TR_TEST_JOBS:-4} tests/run.sh build
}
sanitize() {
    tools/sanitize_cuda.sh build
}
bench() {
    local rc=0
    bench/gpu_train_bench.sh --out build/bench_gpu || rc=1
    bench/bench_hybrid.sh --backend cuda --comm mpi --steps 200 || rc=1
    if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -ge 2 ]; then
        bench/bench_hybrid.sh --backend cuda --comm nccl --steps 200 || rc=1
    else
        echo "gpu_kit: bench_hybrid.sh --comm nccl left out: NCCL needs a GPU for each of its 2 workers"
    fi
    return $rc
}

failed=()
for s in "${stages[@]}"; do
    echo "=== gpu_kit: $s ($(date -u +%H:%M:%S))"
    t0=$(date +%s)
    limit=$(( deadline - t0 ))
    if [ "$limit" -lt 30 ]; then
        echo "gpu_kit: $s not started: ${limit} s of GPU_KIT_BUDGET left" | tee "$out/$s.log"
        failed+=("$s")
        continue
    fi
    # a stage runs in a subshell under timeout, so a hung GPU run still leaves the others
    export -f probe tests sanitize bench
    export out root
    timeout -k 10 "$limit" bash -c "$s" 2>&1 | tee "$out/$s.log"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 124 ] && echo "gpu_kit: $s ran past $limit s and was stopped" | tee -a "$out/$s.log"
    # its files, also when it was stopped
    case $s in
    tests) files=test-logs ;;
    sanitize) files=sanitize ;;
    bench) files=bench_gpu ;;
    *) files= ;;
    esac
    [ -n "$files" ] && [ -d "build/$files" ] && tar -C build -cJf "$out/$s-files.tar.xz" "$files"
    echo "=== gpu_kit: $s: exit $rc, $(( $(date +%s) - t0 )) s"
    [ "$rc" -eq 0 ] || failed+=("$s")
done
[ ${#failed[@]} -eq 0 ] || { echo "gpu_kit: failed: ${failed[*]}"; exit 1; }
echo "gpu_kit: every stage passed: ${stages[*]}"
