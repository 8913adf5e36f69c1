#!/usr/bin/env bash
# run_train_bench.sh: builds bench-bench_train if needed, then for each config runs the C
# benchmark and then bench/torch_dlrm.py (one process at a time, never both in memory),
# and prints one table: terarec vs PyTorch samples/s, roofline, share, target.
# It does not tune anything or retry noisy runs; the CPU time other processes used during
# each run is measured and printed beside it.
#
#   bench/run_train_bench.sh [--quick] [--check] [--config tiny|mlperf|embbound|dcnv2_mlperf]... [--out DIR]
#     dcnv2_mlperf: --preset dlrm_dcnv2_mlperf's model (MLPerf DLRM-DCNv2: multi-hot, cross layers,
#               Adagrad) with its 40 M-row tables capped at 500 k rows
#     --quick   tables divided by 50, 10 timed steps, short machine-limit probes (smoke run)
#     --check   compare each config's share of its roofline with bench/baseline.json (or
#               --baseline FILE); name each that fell by more than its tolerance (5 points),
#               and exit 1 if any did. Run it before resolving work that touches the step.
#     --out     where logs and JSON go (default build/bench_train)
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
out=build/bench_train
quick=0
check=0
baseline=bench/baseline.json
configs=()
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick=1 ;;
    --check) check=1 ;;
    --baseline) baseline="$2"; check=1; shift ;;
    --config) configs+=("$2"); shift ;;
    --out) out="$2"; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_train_bench: unknown argument '$1'" >&2; echo "hint: see $0 --help" >&2; exit 2 ;;
    esac
    shift
done
[ ${#configs[@]} -gt 0 ] || configs=(tiny mlperf embbound dcnv2_mlperf)
if [ $check = 1 ]; then
    if [ $quick = 1 ]; then
        echo "run_train_bench: --check compares full-size runs; --quick's tables are 50 times smaller" >&2
        echo "hint: drop --quick" >&2
        exit 2
    fi
    [ -r "$baseline" ] || { echo "run_train_bench: cannot read the baseline '$baseline'" >&2; exit 2; }
fi

c_args=() py_args=()
if [ $quick = 1 ]; then
    c_args=(--scale 50 --steps 10 --warmup 2 --limit_sec 0.05)
    py_args=(--scale 50 --steps 10 --warmup 2)
fi

py=/usr/bin/python3
mkdir -p "$out"
make -j2 build/bin/bench-bench_train >/dev/null
have_torch=1
if ! "$py" -c 'import torch' 2>/dev/null; then
    have_torch=0
    echo "run_train_bench: $py cannot import torch; PyTorch columns will be empty" >&2
    echo "hint: make deps-bench (installs python3-torch)" >&2
fi

# CPU seconds of this shell's finished children (user + system): `times` must run in this
# shell (not in a $(...) subshell), so it writes to a file that this parses.
children_cpu() {
    tail -1 "$1" | awk '{ s = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); s += a[1] * 60 + a[2] } print s }'
}
# CPU seconds all processes on the machine have used since boot (user, nice, system, irq,
# softirq), and seconds the hypervisor stole from this VM: "busy steal".
machine_cpu() {
    awk -v hz="$(getconf CLK_TCK)" '/^cpu / { print ($2 + $3 + $4 + $7 + $8) / hz, $9 / hz }' /proc/stat
}
# run_one NAME LOG CMD...: runs CMD, tees its output to LOG, and writes NAME.load with the
# CPU time that other processes used meanwhile (machine CPU minus this run's own CPU) and
# the time the hypervisor stole.
run_one() {
    local name=$1 log=$2
    shift 2
    local c0 m0 t0 c1 m1 t1
    times >"$out/.times"
    c0=$(children_cpu "$out/.times") m0=$(machine_cpu) t0=$(date +%s.%N)
    "$@" | tee "$log"
    times >"$out/.times"
    c1=$(children_cpu "$out/.times") m1=$(machine_cpu) t1=$(date +%s.%N)
    awk -v c="$c1 $c0" -v m="$m1 $m0" -v w="$t1 $t0" 'BEGIN {
        split(c, a, " "); split(m, b, " "); split(w, d, " ");
        own = a[1] - a[2]; all = b[1] - b[3]; steal = b[2] - b[4]; wall = d[1] - d[2];
        other = all - own; if (other < 0) other = 0;
        printf "wall %.0f s, own %.0f CPU-s, other processes %.0f CPU-s (%.2f cores on average), stolen by the" \
               " hypervisor %.1f s\n", wall, own, other, other / wall, steal }' >"$out/$name.load"
    echo "### concurrent load during $name: $(cat "$out/$name.load")"
}

for c in "${configs[@]}"; do
    rm -f "$out/c_$c.json" "$out/torch_$c.json"
    echo "### $c: terarec"
    echo "\$ build/bin/bench-bench_train --config $c ${c_args[*]} --json $out/c_$c.json"
    run_one "c_$c" "$out/c_$c.log" build/bin/bench-bench_train --config "$c" "${c_args[@]}" --json "$out/c_$c.json"
    if [ $have_torch = 1 ]; then
        echo "### $c: PyTorch"
        echo "\$ $py bench/torch_dlrm.py --config $c ${py_args[*]} --json $out/torch_$c.json"
        run_one "torch_$c" "$out/torch_$c.log" "$py" bench/torch_dlrm.py --config "$c" "${py_args[@]}" \
            --json "$out/torch_$c.json"
    fi
done

case "$out" in /*) out_abs=$out ;; *) out_abs=$root/$out ;; esac
case "$baseline" in /*) ;; *) baseline=$root/$baseline ;; esac
[ $check = 1 ] || baseline=
"$py" - "$out_abs" "$baseline" "${configs[@]}" <<'EOF'
import json, os, sys
out, baseline, names = sys.argv[1], sys.argv[2], sys.argv[3:]
def load(p):
    try:
        with open(p) as f:
            return json.load(f)["configs"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None
hdr = ("config", "terarec samples/s", "PyTorch samples/s", "ratio", "roofline (kind)", "share of roofline",
       "target met?")
rows = []
for n in names:
    c, t = load(f"{out}/c_{n}.json"), load(f"{out}/torch_{n}.json")
    if c is None:
        rows.append((n, "failed", "", "", "", "", ""))
        continue
    ts = f"{t['samples_per_s']:.0f}" if t else "n/a"
    ratio = f"{c['samples_per_s'] / t['samples_per_s']:.2f}x" if t else "n/a"
    roof = f"{c['roofline']:.0f} ({c['bound']})"
    share = f"{100 * c['share']:.1f}%"
    tgt = (f"{'yes' if c['target_met'] else 'NO'}: {100 * c['share_target']:.1f}% of {c['target_kind']}"
           f" (>= {100 * c['target']:.0f}%)")
    rows.append((n, f"{c['samples_per_s']:.0f}", ts, ratio, roof, share, tgt))
w = [max(len(str(r[i])) for r in rows + [hdr]) for i in range(len(hdr))]
line = lambda r: " | ".join(str(v).ljust(w[i]) for i, v in enumerate(r))
print()
print(line(hdr))
print("-+-".join("-" * x for x in w))
for r in rows:
    print(line(r))
print()
print("where the numbers come from:")
print(f"  terarec samples/s, roofline, share, target: {out}/c_<config>.json (bench-bench_train: timed training"
      " steps as the worker runs them, in 5 rounds, each followed by a round of the GEMM probe and one of the"
      " random-row probe; GEMM roofline = B / sum of measured be.i->gemm times of the step's GEMMs; bandwidth"
      " roofline = R_step / ids a sample (26; dcnv2_mlperf: 214, its bags), R_step = rows/s of gathering then"
      " updating random rows of the model's own tables as a step does (with a zero gradient: the tables keep"
      " their values); a round's share = its median step's rate over its own probes' roofline, the share = the"
      " median round's; the smaller roofline applies; samples/s = the mean over all timed steps)")
print(f"  PyTorch samples/s: {out}/torch_<config>.json (bench/torch_dlrm.py, same shapes, batch, steps,"
      " 2 threads, OMP_WAIT_POLICY=PASSIVE)")
print("  ratio = terarec / PyTorch; logs beside the JSON files")
for n in names:
    la = []
    for k in ("c", "torch"):
        try:
            with open(f"{out}/{k}_{n}.load") as f:
                la.append(f"{k} run: {f.read().strip()}")
        except OSError:
            pass
    c, t = load(f"{out}/c_{n}.json"), load(f"{out}/torch_{n}.json")
    extra = f"scale 1/{c['scale']}, {c['steps']} steps after {c['warmup']} warm-up" if c else ""
    if c and t:
        extra += (f"; median-step rates: terarec {c['batch_size'] / c['step_ms_median'] * 1e3:.0f},"
                  f" PyTorch {t['batch_size'] / t['step_ms_median'] * 1e3:.0f} samples/s")
    if c and "gemm_in_step_ms_per_step" in c:
        step_ms = c["batch_size"] / c["samples_per_s"] * 1e3
        extra += (f"; a step {step_ms:.2f} ms: its GEMMs {c['gemm_in_step_ms_per_step']:.2f} ms in the step"
                  f" (with their epilogues) against {c['gemm_ms_per_step']:.2f} ms in the probe,"
                  f" {step_ms - c['gemm_in_step_ms_per_step']:.2f} ms outside them")
    print(f"  {n}: {extra}; " + "; ".join(la))
if not baseline:
    sys.exit(0)
# --check: each config's share of its roofline against the committed one
try:
    with open(baseline) as f:
        base = json.load(f)
    tol, bconf = float(base["tolerance_points"]), base["configs"]
except (OSError, ValueError, KeyError, TypeError) as e:
    print(f"run_train_bench: {baseline}: not a baseline ({e})", file=sys.stderr)
    sys.exit(2)
m = base.get("measured", {})
print()
print(f"check against {baseline} (measured {m.get('date', '?')} at {m.get('commit', '?')};"
      f" a fall of more than {tol:g} points fails):")
fell = []
for n in names:
    c, b = load(f"{out}/c_{n}.json"), bconf.get(n)
    if b is None:
        print(f"  {n}: no baseline figure, not checked")
        continue
    if c is None:
        print(f"  {n}: FAILED to run (baseline {100 * b['share']:.1f}%)")
        fell.append(n)
        continue
    d = 100 * (c["share"] - b["share"])
    bad = d < -tol
    kind = "" if c["bound"] == b["bound"] else f" (bound now {c['bound']}, was {b['bound']})"
    print(f"  {n}: {100 * c['share']:.1f}% of {c['bound']} roofline, baseline {100 * b['share']:.1f}%:"
          f" {d:+.1f} points{kind}{'  FELL' if bad else ''}")
    if bad:
        fell.append(n)
if fell:
    print(f"check: {len(fell)} of {len(names)} fell by more than {tol:g} points: {', '.join(fell)}")
    sys.exit(1)
print(f"check: none of {len(names)} fell by more than {tol:g} points")
EOF
