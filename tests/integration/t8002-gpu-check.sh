#!/usr/bin/env bash
# t8002: tools/gpu_check.sh, the one command that checks the CUDA backend on a lent
# GPU machine, walked here without a GPU (run --dry-run): every stage in order with
# its budget, within the 540 s of a 10-minute call; every kernel test's CUDA cases
# under the kernels stage and memcheck, racecheck on the tests of the kernels that
# use shared memory and not on the cuBLASLt/CUB-heavy ones; the speed stage times
# warm steps (the worker's phase split too); --only picks stages and refuses an unknown one; a bad argument is
# refused with a hint. (The run itself needs the GPU: tools/gpu_check.sh run there.)
. "$(dirname "$0")/lib.sh"
K=$TR_ROOT/tools/gpu_check.sh
cd "$TR_ROOT" || exit 1
out=$("$K" run --dry-run --out "$TMP/o" 2>&1); rc=$?
stages=$(echo "$out" | sed -n 's/^stage \([a-z0-9]*\): budget \([0-9]*\) s$/\1 \2/p')
if [ $rc -eq 0 ] && [ "$(echo "$stages" | cut -d' ' -f1 | paste -sd,)" = probe,kernels,t8001,nccl1,sanitize,speed ]; then
    ok "run --dry-run walks the stages in order: $(echo "$stages" | paste -sd' ')"
else
    fail "run --dry-run walks the stages in order" "rc $rc: $(echo "$out" | head -5)"
fi
total=$(echo "$stages" | awk '{s += $2} END {print s + 0}')
[ "$total" -gt 0 ] && [ "$total" -le 540 ] && ok "the budgets add up to $total s (at most 540)" ||
    fail "the budgets add up to at most 540 s" "$total"
# every kernel test of the sources (but the host-only ones) runs its CUDA cases, and under memcheck
missing=
for src in tests/kernels/test_*.c tests/golden/test_*.c; do
    t=${src#tests/}; t=build/tests/${t%.c}
    case ${t##*/} in test_sort|test_metrics) continue ;; esac
    arg=cuda; [ "${t##*/}" = test_kmath_gpu ] && arg=
    echo "$out" | grep -qE "would run: TR_TEST_GPU=1 timeout [0-9]+ $t $arg *\$" || missing+=" kernels:${t##*/}"
    echo "$out" | grep -qE "would run: compute-sanitizer --tool memcheck .* $t " || missing+=" memcheck:${t##*/}"
done
[ -z "$missing" ] && ok "every kernel test runs its CUDA cases, and under memcheck" || fail "kernel tests missing" "$missing"
race=$(echo "$out" | grep -- '--tool racecheck' | grep -oE 'test_[a-z_0-9]+( [a-z_]+)?$' | paste -sd' ')
if echo "$race" | grep -q test_embedding && echo "$race" | grep -q "test_dense bias_act_" &&
    ! echo "$race" | grep -qE 'test_interact|test_metrics_op|test_determinism|test_golden|test_dense cuda'; then
    ok "racecheck on the shared-memory kernels' tests, not the cuBLASLt/CUB-heavy ones"
else
    fail "racecheck selection" "$race"
fi
echo "$out" | grep -q "would run: env .*TR_TEST_ONLY=t8001 tests/run.sh" &&
    echo "$out" | grep -q "TR_T8003_PART=gpu-world1" && ok "t8001 and t8003's world of 1 under TR_TEST_GPU=1" ||
    fail "t8001 and t8003's world of 1" "$(echo "$out" | grep 'tests/run.sh')"
echo "$out" | grep -q "would run: bench/gpu_train_bench.sh --budget" && ok "the speed stage runs the GPU bench within its budget" ||
    fail "the speed stage" "$(echo "$out" | tail -2)"
# the bench times warm steps only: the worker's phase split, like its throughput, leaves
# the --benchmark_warmup_steps out. The first step makes the 16 synthetic batches
# (about 300 times a later step's data phase here), so a split that counted it would
# show a data phase some 50 times the warm one; the factor 4 the test asks for
# leaves room for a 2-core CI host's noise (its warm steps once took 6 ms, not 1).
grep -q -- '--benchmark_warmup_steps "$warm" --max_steps $(( warm + steps ))' "$TR_ROOT/bench/gpu_train_bench.sh" ||
    fail "gpu_train_bench.sh passes --benchmark_warmup_steps below --max_steps"
data_ms() { # WARMUP: the summary's data ms per step of 6 steps
    "$TR_BIN/terarec-worker" --batch_size 16384 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 16 \
        --bottom_mlp_dims 32,16 --top_mlp_dims 32,1 --max_steps 6 --benchmark_warmup_steps "$1" \
        --synthetic_dataset_train_batches 16 --synthetic_dataset_valid_batches 1 --threads 2 \
        --log_path "$TMP/w$1.json" >/dev/null 2>&1 || { echo "run failed"; return; }
    python3 - "$TMP/w$1.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("DLLL "):
        d = json.loads(line[5:]).get("data", {})
        if "phase_ms_per_step" in d:
            print(f"{d['phase_ms_per_step']['data']:.2f}")
PY
}
all=$(data_ms 0) warm=$(data_ms 2)
if python3 -c "import sys; sys.exit(0 if 0 <= $warm * 4 < $all else 1)" 2>/dev/null; then
    ok "the phase split counts warm steps only (data: $warm ms/step after 2 warmup steps, $all over all 6)"
else
    fail "the phase split counts warm steps only" "data ms/step: warm $warm, all $all"
fi
out=$("$K" run --dry-run --only speed,kernels --out "$TMP/o" 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(echo "$out" | grep -c '^stage ')" = 2 ] && echo "$out" | grep -q '^stage kernels' &&
    ok "--only kernels,speed runs those two, in the kit's order" || fail "--only" "rc $rc: $(echo "$out" | grep '^stage')"
out=$("$K" run --dry-run --only kernel 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "unknown stage 'kernel'" && echo "$out" | grep -q "^hint: probe kernels" &&
    ok "--only with an unknown stage: exit 2, named, the stages as a hint" || fail "--only kernel" "rc $rc: $out"
out=$("$K" run --bogus 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "unknown argument '--bogus'" && ok "run --bogus: exit 2" || fail "run --bogus" "rc $rc: $out"
out=$("$K" frobnicate 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "^hint: " && ok "an unknown command: exit 2 with a hint" || fail "unknown command" "rc $rc: $out"
out=$(bash "$TR_ROOT/bench/gpu_train_bench.sh" --steps x 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q -- "--steps 'x' is not a number" && ok "gpu_train_bench.sh --steps x: exit 2" ||
    fail "gpu_train_bench.sh --steps x" "rc $rc: $out"
done_testing
