#!/usr/bin/env bash
# sanitize_cuda.sh [BUILD]: every kernel test's CUDA cases (BUILD/tests/kernels/test_*
# with the argument cuda) under compute-sanitizer's memcheck and racecheck, each
# report in BUILD/sanitize/TOOL-TEST.log. Exits 1 at the first test with a report or
# a failure (its log's end shown), 0 when all are clean. TR_TEST_GPU=1 is set, so a
# test that finds no GPU fails instead of skipping: a clean run without a GPU would
# prove nothing. What make sanitize-cuda runs; tools/gpu_kit.sh runs it on machines
# without make.
set -uo pipefail
build=${1:-build}
command -v compute-sanitizer >/dev/null || {
    echo "sanitize_cuda: compute-sanitizer is not installed (it comes with the CUDA toolkit)" >&2
    exit 1
}
tests=$(find "$build/tests/kernels" -type f -name 'test_*' -perm -u+x 2>/dev/null | sort)
[ -n "$tests" ] || { echo "sanitize_cuda: no kernel tests in $build/tests/kernels" >&2; echo "hint: make" >&2; exit 1; }
mkdir -p "$build/sanitize"
for t in $tests; do
    for tool in memcheck racecheck; do
        log=$build/sanitize/$tool-${t##*/}.log
        echo "  SANITIZE $tool ${t##*/}"
        if ! TR_TEST_GPU=1 compute-sanitizer --tool "$tool" --error-exitcode 99 "$t" cuda >"$log" 2>&1; then
            tail -n 30 "$log"
            exit 1
        fi
        grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed' "$log" | tail -n 2 | sed 's/^/    /'
    done
done
