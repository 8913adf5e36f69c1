#!/usr/bin/env bash
# t8001: the CUDA backend from the command line.
# On every machine (these run in CI, which has no GPU):
# - --backend cuda without a device (or in a build without CUDA): exit 1 with one
#   error line saying why and a hint, before any training;
# - --amp on the cpu backend (or auto without a device) is refused the same way;
#   a bad --amp value is bad input (exit 2); a bare --amp means bf16; terarec train
#   refuses --amp here before it starts anything (exit 2, no run row);
# - terarec plan --backend cuda plans without a GPU (a sizing-only instance);
# - a CUDA plugin from another build (its build hash patched in a copy) is refused
#   with one error naming both builds and a hint;
# - make bundle's folder, moved elsewhere, runs with its own libraries: every
#   non-system library resolves into its lib/, --version lists the backends, a
#   short training run completes from it, and the CUDA plugin loads from its lib/.
# With a GPU (each SKIPs without one; TR_TEST_GPU=1 makes that a failure):
# - fp32 (TF32 off): the loss of each of 20 steps within 1e-5 of the cpu backend's
#   and every final weight tensor within 1e-4 (compare_runs.py; t2002 says why 1e-4);
# - 300 steps on the synthetic data: the final AUC within 0.002 of the cpu
#   backend's, and with --amp bf16 and --amp fp16 within 0.003; the losses of those
#   three runs differ from each other's (each precision is in effect);
# - the worker's GPU memory peak (the backend's own count) within 5% of its plan.
. "$(dirname "$0")/lib.sh"
W=$TR_BIN/terarec-worker
cd "$TMP" || exit 1
M="--batch_size 512 --synthetic_dataset_cardinalities 26x1000 --embedding_dim 16 --bottom_mlp_dims 32,16
   --top_mlp_dims 64,32,1 --learning_rate 0.5 --warmup_steps 0 --synthetic_dataset_valid_batches 4 --threads 2"
devices=$($W --version --parsable 2>/dev/null | sed -n 's/^cuda_devices://p')
devices=${devices:-0}
has_cuda_build=0
$W --version --parsable | grep -q '^cuda:yes' && has_cuda_build=1

# ---- without a device ---------------------------------------------------------------
if [ "$devices" -eq 0 ]; then
    out=$($W $M --max_steps 5 --backend cuda 2>&1); rc=$?
    if [ $rc -eq 1 ] && echo "$out" | grep -qE "error: backend 'cuda': (no CUDA device is visible|this build has no CUDA)" &&
        echo "$out" | grep -q "hint: " && ! echo "$out" | grep -q "step 1"; then
        ok "--backend cuda without a device: exit 1, the reason and a hint"
    else
        fail "--backend cuda without a device" "rc $rc: $(echo "$out" | tail -3)"
    fi
    out=$($W $M --max_steps 5 --amp 2>&1); rc=$?
    if [ $rc -eq 1 ] && echo "$out" | grep -q "error: backend auto: no backend of this build opens with bf16 GEMMs" &&
        echo "$out" | grep -q "hint: --amp needs a CUDA device"; then
        ok "a bare --amp (bf16) without a device is refused, naming --amp"
    else
        fail "--amp without a device" "rc $rc: $(echo "$out" | tail -3)"
    fi
    out=$($W $M --max_steps 5 --backend cpu --amp fp16 2>&1); rc=$?
    if [ $rc -eq 1 ] && echo "$out" | grep -q "error: backend 'cpu': computes in fp32 only; --amp (fp16 GEMMs)"; then
        ok "--amp fp16 --backend cpu is refused"
    else
        fail "--amp fp16 --backend cpu" "rc $rc: $(echo "$out" | tail -3)"
    fi
    out=$($TR_BIN/terarec train --amp --db "$TMP/hist/runs.db" $M --max_steps 5 2>&1); rc=$?
    why="no CUDA device is visible"
    [ $has_cuda_build = 1 ] || why="this build has no CUDA backend"
    if [ $rc -eq 2 ] && echo "$out" | grep -q "error: backend 'auto' with --amp: $why" &&
        [ ! -e "$TMP/hist/runs.db" ]; then
        ok "terarec train --amp without a device: exit 2 before anything starts (no run row)"
    else
        fail "terarec train --amp without a device" "rc $rc: $(echo "$out" | tail -3)"
    fi
else
    skip "--backend cuda without a device" "this machine has $devices CUDA device(s)"
    skip "--amp without a device" "this machine has $devices CUDA device(s)"
    skip "--amp fp16 --backend cpu" "this machine has $devices CUDA device(s)"
    skip "terarec train --amp without a device" "this machine has $devices CUDA device(s)"
fi
out=$($W $M --max_steps 5 --amp bf61 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "amp: 'bf61' is not one of off|bf16|fp16" && ok "--amp bf61: exit 2 naming the choices" \
    || fail "--amp bf61" "rc $rc: $(echo "$out" | tail -2)"
out=$($W $M --max_steps 5 --amp=bf61 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$out" | grep -q "amp: 'bf61' is not one of off|bf16|fp16" && ok "--amp=bf61: exit 2 naming the choices" \
    || fail "--amp=bf61" "rc $rc: $(echo "$out" | tail -2)"

# ---- terarec plan --backend cuda without a GPU ----------------------------------------------
if [ $has_cuda_build -eq 1 ]; then
    # the seed's 1.68 TB example: Criteo Terabyte (day 0's vocabularies), dim 512,
    # column-wise over 4 nodes x 8 GPUs
    out=$($TR_BIN/terarec plan --backend cuda --preset criteo_tb_t0 --nodes 4 --gpus_per_node 8 \
          --embedding_dim 512 --bottom_mlp_dims 512,256,512 --batch_size 65536 --columnwise_split \
          --data_parallel_bottom_mlp 2>&1); rc=$?
    gpu=$(echo "$out" | sed -n 's/^GPU memory: rank [0-9]* holds the most, \([0-9.]*\) GiB.*/\1/p')
    if [ $rc -eq 0 ] && echo "$out" | grep -q "882000000 embedding rows, dim 512" &&
        python3 -c "import sys; sys.exit(0 if 40 < float('${gpu:-0}') < 80 else 1)"; then
        ok "terarec plan --backend cuda without a GPU: the 1.68 TB model on 4 x 8 GPUs, $gpu GiB per GPU (< 80)"
    else
        fail "terarec plan --backend cuda" "rc $rc: $(echo "$out" | tail -3)"
    fi
else
    skip "terarec plan --backend cuda" "built without CUDA (no nvcc)"
fi

# ---- a CUDA plugin from another build is refused ---------------------------------------------
# a copy of terarec with the plugin beside it (lib/ next to bin/, where it looks
# first): this build's plugin loads; the same file with its build hash changed (the
# one place it holds it: kern_cuda_plugin_id) is refused, naming both builds
plugin=$TR_BUILD/lib/libterarec-cuda.so
if [ $has_cuda_build -eq 1 ] && [ -f "$plugin" ]; then
    F=$TMP/foreign
    mkdir -p "$F/bin" "$F/lib"
    cp "$TR_BIN/terarec" "$F/bin/"
    cp "$plugin" "$F/lib/"
    ours=$($TR_BIN/terarec --version --parsable | sed -n 's/^git://p')
    P="plan --backend cuda --synthetic_dataset_cardinalities 26x1000"
    out=$("$F/bin/terarec" $P 2>&1); rc=$?
    if [ $rc -eq 0 ] && echo "$out" | grep -q "GPU memory: rank 0"; then
        ok "this build's CUDA plugin, copied beside a copy of terarec, loads"
    else
        fail "this build's CUDA plugin loads from a copy" "rc $rc: $(echo "$out" | tail -3)"
    fi
    theirs=$(python3 - "$plugin" "$F/lib/libterarec-cuda.so" "$ours" <<'PY'
import sys
src, dst, ours = sys.argv[1], sys.argv[2], sys.argv[3].encode()
theirs = bytes(ord("1") if c == ord("0") else ord("0") for c in ours)  # as long, and different everywhere
data = open(src, "rb").read()
n = data.count(ours + b"\0")
if not ours or n != 1:
    sys.exit(f"the plugin holds its build hash '{ours.decode()}' {n} times, not once")
open(dst, "wb").write(data.replace(ours + b"\0", theirs + b"\0"))
print(theirs.decode())
PY
    ) || fail "patch the plugin's build hash" "$theirs"
    out=$("$F/bin/terarec" $P 2>&1); rc=$?
    if [ -n "$theirs" ] && [ $rc -eq 1 ] &&
        echo "$out" | grep -q "error: backend 'cuda': plugin $F/.*libterarec-cuda\.so is from another build (api [0-9]*, git $theirs); this program is api [0-9]*, git $ours\$" &&
        echo "$out" | grep -q "hint: use the plugin built with this program" && ! echo "$out" | grep -q "GPU memory"; then
        ok "a CUDA plugin from another build is refused, naming both builds (git $theirs and $ours) and a hint"
    else
        fail "a CUDA plugin from another build is refused" "rc $rc: $(echo "$out" | tail -3)"
    fi
else
    skip "a CUDA plugin from another build is refused" "built without CUDA"
fi

# ---- make bundle ----------------------------------------------------------------------------
if ! command -v patchelf >/dev/null; then
    skip "make bundle" "patchelf is not installed (make deps installs it)"
else
    B=$TMP/moved/terarec-bundle
    mkdir -p "$TMP/moved"
    # BUNDLE_CUDA=0: the CUDA toolkit's libraries (cuBLASLt alone is 540 MB) stay with
    # the machine, as on GPU nodes that have the CUDA runtime
    plugin=$TR_BUILD/lib/libterarec-cuda.so
    [ -f "$plugin" ] || plugin=
    out=$(BUNDLE_CUDA=0 "$TR_ROOT/tools/bundle.sh" "$TMP/bundle" "$TR_BIN/terarec-worker" "$TR_BIN/terarec" \
          $plugin 2>&1) &&
        mv "$TMP/bundle" "$B" || fail "bundle.sh" "$out"
    # the moved bundle runs as on a node with nothing set: an LD_LIBRARY_PATH (one of
    # tools/gpu_check.sh, say) would hide what its RUNPATH finds
    bare() { env -u LD_LIBRARY_PATH "$@"; }
    if [ -x "$B/bin/terarec-worker" ]; then
        # every library that is not the C runtime or the driver resolves inside the bundle
        outside=$(bare ldd "$B/bin/terarec-worker" | awk '$2 == "=>" {print $1, $3}' |
            grep -vE '^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl\.|librt\.|libresolv|libutil|libgcc_s|libstdc\+\+|libcuda\.|libnvidia-)' |
            grep -vE '^(libcudart|libcublas|libcublasLt|libnccl)\.' | grep -vE " $B/(bin/\.\./)?lib/" || true)
        nlib=$(ls "$B/lib" | wc -l)
        if [ -z "$outside" ] && [ "$nlib" -gt 5 ]; then
            ok "bundle: the worker's $nlib non-system libraries all load from the moved bundle's lib/"
        else
            fail "bundle: libraries resolve inside the bundle" "outside: $outside (lib/ has $nlib)"
        fi
        ver=$(bare "$B/bin/terarec-worker" --version 2>&1)
        echo "$ver" | grep -qE '^backends: (cuda \([0-9]+ devices? visible\), )?cpu$' &&
            ok "bundle: terarec-worker --version lists its backends ($(echo "$ver" | tail -1))" ||
            fail "bundle: --version" "$ver"
        out=$(bare "$B/bin/terarec-worker" $M --max_steps 10 --backend cpu 2>&1) &&
            ok "bundle: a 10-step training run from the moved bundle" ||
            fail "bundle: training from the bundle" "$(echo "$out" | tail -3)"
        if [ -n "$plugin" ]; then
            # a cuda plan opens the backend sizing-only: the plugin loads from the bundle's lib/
            out=$(LD_DEBUG=files bare "$B/bin/terarec" plan --backend cuda --synthetic_dataset_cardinalities 26x1000 2>&1)
            if [ -f "$B/lib/libterarec-cuda.so" ] && echo "$out" | grep -q "GPU memory: rank 0" &&
                echo "$out" | grep -qE "calling init: $B/(bin/\.\./)?lib/libterarec-cuda\.so"; then
                ok "bundle: the CUDA plugin loads from the moved bundle (terarec plan --backend cuda)"
            else
                fail "bundle: the CUDA plugin loads from the bundle" "$(echo "$out" | grep -E 'terarec-cuda|error' | tail -4)"
            fi
        else
            skip "bundle: the CUDA plugin loads from the moved bundle" "built without CUDA"
        fi
    fi
fi

# ---- with a GPU -----------------------------------------------------------------------------
gpu_skip() { # NAME
    if [ "${TR_TEST_GPU:-0}" = 1 ]; then
        fail "$1" "no CUDA device, and TR_TEST_GPU=1 requires one"
    else
        skip "$1" "no CUDA device ($([ $has_cuda_build -eq 1 ] && echo "0 visible" || echo "built without CUDA"))"
    fi
}
final_auc() { # LOG: the AUC of the last evaluation
    python3 - "$1" <<'PY'
import json, sys
auc = None
for line in open(sys.argv[1]):
    if line.startswith("DLLL "):
        d = json.loads(line[5:]).get("data", {})
        if "auc" in d and "eval_samples" in d:
            auc = d["auc"]
print(auc)
PY
}
train() { # NAME BACKEND STEPS EXTRA...: log.json and the weights in $TMP/NAME
    local name=$1 be=$2 steps=$3; shift 3
    mkdir -p "$TMP/$name"
    local out
    out=$($W $M --backend "$be" --max_steps "$steps" --print_freq 1 --log_path "$TMP/$name/log.json" \
          --dump_weights "$TMP/$name" "$@" 2>&1) || { echo "$out" | tail -n 20 | sed 's/^/# /'; return 1; }
}
if [ "$devices" -eq 0 ]; then
    gpu_skip "cuda fp32 equals cpu: 20 losses (1e-5) and the weights (1e-4)"
    gpu_skip "cuda 300 steps: AUC within 0.002 of cpu"
    gpu_skip "cuda --amp bf16 300 steps: AUC within 0.003 of cpu"
    gpu_skip "cuda --amp fp16 300 steps: AUC within 0.003 of cpu"
    gpu_skip "cuda: GPU memory peak within 5% of the plan"
    gpu_skip "cuda: fp32, --amp bf16 and --amp fp16 train differently"
else
    # a model whose tables dominate (1.3 GB), so the check is about the plan, not the fixed buffers
    mkdir -p "$TMP/mem"
    if out=$($W --backend cuda --batch_size 4096 --synthetic_dataset_cardinalities 26x200000 --embedding_dim 64 \
             --bottom_mlp_dims 128,64 --top_mlp_dims 256,1 --max_steps 5 --synthetic_dataset_valid_batches 1 \
             --log_path "$TMP/mem/log.json" 2>&1) &&
        cmp=$(python3 - "$TMP/mem/log.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("DLLL "):
        m = json.loads(line[5:]).get("data", {}).get("memory")
        if m and "device_peak_bytes" in m:
            peak, plan = m["device_peak_bytes"][0], m["device_plan_bytes"][0]
            print(f"peak {peak / 2**20:.1f} MiB, plan {plan / 2**20:.1f} MiB, {100 * (plan - peak) / peak:+.2f}%")
            sys.exit(0 if abs(plan - peak) <= 0.05 * peak else 1)
print("no device_peak_bytes in the summary")
sys.exit(1)
PY
        ); then
        ok "cuda: GPU memory peak within 5% of the plan ($cmp)"
    else
        fail "cuda: GPU memory peak within 5% of the plan" "${cmp:-$(echo "$out" | tail -3)}"
    fi
    if train cpu20 cpu 20 && train cuda20 cuda 20 &&
        out=$(python3 "$TR_ROOT/tests/integration/compare_runs.py" --wtol 1e-4 "$TMP/cpu20" "$TMP/cuda20" 2>&1); then
        ok "cuda fp32 equals cpu: 20 losses (1e-5) and the weights (1e-4) ($(echo "$out" | tail -1))"
    else
        fail "cuda fp32 equals cpu" "$(echo "${out:-run failed}" | grep -v '^ok' | tail -8)"
    fi
    train cpu300 cpu 300 || fail "cpu 300 steps"
    ref=$(final_auc "$TMP/cpu300/log.json")
    for v in "fp32 0.002" "bf16 0.003" "fp16 0.003"; do
        set -- $v
        extra=""
        [ "$1" != fp32 ] && extra="--amp $1"
        name="cuda --amp $1 300 steps: AUC within $2 of cpu"
        [ "$1" = fp32 ] && name="cuda 300 steps: AUC within $2 of cpu"
        if train "cuda300$1" cuda 300 $extra; then
            got=$(final_auc "$TMP/cuda300$1/log.json")
            if python3 -c "import sys; sys.exit(0 if abs($got - $ref) <= $2 else 1)" 2>/dev/null; then
                ok "$name (cpu $ref, cuda $got)"
            else
                fail "$name" "cpu $ref, cuda $got"
            fi
        else
            fail "$name" "the run failed"
        fi
    done
    # the precisions are really in effect: each of the three runs' losses differ from
    # the others' (an --amp that fell back to fp32 everywhere would repeat its losses)
    if out=$(python3 - "$TMP"/cuda300fp32/log.json "$TMP"/cuda300bf16/log.json "$TMP"/cuda300fp16/log.json <<'PY'
import json, sys
def losses(p):
    out = []
    for line in open(p):
        if line.startswith("DLLL "):
            r = json.loads(line[5:])
            if isinstance(r.get("step"), int) and "loss" in r.get("data", {}):
                out.append(r["data"]["loss"])
    return out
runs = {n: losses(p) for n, p in zip(("fp32", "bf16", "fp16"), sys.argv[1:])}
same = [f"{a} = {b}" for a in runs for b in runs if a < b and runs[a] == runs[b]]
if any(len(v) < 10 for v in runs.values()) or same:
    print("; ".join(same) or "too few losses logged: " + str({k: len(v) for k, v in runs.items()}))
    sys.exit(1)
diff = max(abs(x - y) for x, y in zip(runs["bf16"], runs["fp16"]))
print(f"{len(runs['fp32'])} losses each; bf16 and fp16 differ by up to {diff:.2e}")
PY
    ); then
        ok "cuda: fp32, --amp bf16 and --amp fp16 train differently ($out)"
    else
        fail "cuda: fp32, --amp bf16 and --amp fp16 train differently" "$out"
    fi
fi
done_testing
