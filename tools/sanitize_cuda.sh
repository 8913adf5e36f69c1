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
    # the backend-loop tests take "cuda" (their CUDA cases); test_kmath_gpu's cases
    # are all on the device; test_sort and test_metrics test host functions
    case ${t##*/} in
    test_kmath_gpu) arg=() ;;
    test_sort|test_metrics) continue ;;
    *) arg=(cuda) ;;
    esac
    for tool in memcheck racecheck; do
        log=$build/sanitize/$tool-${t##*/}.log
        echo "  SANITIZE $tool ${t##*/}"
        if ! TR_TEST_GPU=1 compute-sanitizer --tool "$tool" --error-exitcode 99 "$t" "${arg[@]}" >"$log" 2>&1; then
            tail -n 30 "$log"
            exit 1
        fi
        # a run of no case would prove nothing
        grep -qE '^[1-9][0-9]* passed, 0 failed' "$log" || { tail -n 30 "$log"; echo "sanitize_cuda: ${t##*/} ran no case"; exit 1; }
        grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed' "$log" | tail -n 2 | sed 's/^/    /'
    done
done
