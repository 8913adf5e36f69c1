#!/usr/bin/env python3
# gpu_bench_report.py: the two halves of bench/gpu_train_bench.sh that read JSON.
#   row LOG MODE        one terarec row (JSON line) from a worker's DLLogger summary
#   table RESULTS BATCH the table: each row's samples/s and step time, terarec's phase
#                       split, the ratio to PyTorch's best, the limits measured in the
#                       same run, each terarec row's share of its roofline, and the
#                       three phases of the --amp row furthest above their floors
# A floor is the least time a phase can take at the limits measured in the same run:
# the GEMMs of a layer at the probe's rate for that shape and precision (backward:
# two GEMMs), the embedding rows at the random-row gather rate, the interaction's
# and the batch's bytes at the copy rates. It reads only; it measures nothing.
import json
import sys

NT, DIM = 26, 128
BOTTOM, TOP = [512, 256, 128], [1024, 1024, 512, 256, 1]
PREC = {"fp32": "fp32", "tf32": "tf32", "amp-bf16": "bf16", "amp-fp16": "fp16"}


def row(log, mode):
    summ = None
    for line in open(log):
        if line.startswith("DLLL "):
            d = json.loads(line[5:]).get("data", {})
            if "throughput" in d:
                summ = d
    if summ is None:
        sys.exit(f"gpu_bench_report: no summary record in {log}")
    print(json.dumps({"kind": "terarec", "mode": mode, "samples_per_s": summ["throughput"],
                      "step_ms": summ["mean_step_time_ms"], "phases": summ.get("phase_ms_per_step", {})}))


def floors(B, lim, prec):
    """ms per step each phase needs at the measured limits, or None where unmeasured"""
    gather, copy, h2d = lim.get("gather"), lim.get("copy"), lim.get("h2d")
    gemm = {(g["m"], g["k"], g["n"]): g["tflops"] for g in lim.get("gemm", []) if g["prec"] == prec}

    def gemm_ms(dims):
        t, prev = 0.0, dims[0]
        for o in dims[1:]:
            r = gemm.get((B, prev, o))
            if r is None:
                return None
            t += 2 * B * prev * o / (r * 1e12)
            prev = o
        return t * 1e3

    n = NT + 1
    top_in = DIM + n * (n - 1) // 2
    f = {}
    bf, tf = gemm_ms([13] + BOTTOM), gemm_ms([top_in] + TOP)
    f["bottom_fwd"], f["top_fwd"] = bf, tf
    f["bottom_bwd"] = 2 * bf if bf is not None else None
    f["top_bwd"] = 2 * tf if tf is not None else None
    if gather:
        f["emb_fwd"] = NT * B / gather["rows_per_s"] * 1e3
        f["emb_update"] = NT * B / gather["rows_per_s"] * 1e3  # each row read and written once
    if copy:
        bw = copy["bytes_per_s"]
        f["interact_fwd"] = (B * n * DIM + B * top_in) * 4 / bw * 1e3
        f["interact_bwd"] = (2 * B * n * DIM + B * top_in) * 4 / bw * 1e3
        f["loss"] = B * 12 / bw * 1e3
    if h2d:
        f["data"] = B * (13 + NT + 1) * 4 / h2d["bytes_per_s"] * 1e3
    return f


def table(path, B):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    tr = {r["mode"]: r for r in rows if r["kind"] == "terarec"}
    pt = {r["mode"]: r for r in rows if r["kind"] == "train"}
    lim = {"gather": next((r for r in rows if r["kind"] == "gather"), None),
           "copy": next((r for r in rows if r["kind"] == "copy"), None),
           "h2d": next((r for r in rows if r["kind"] == "h2d"), None),
           "gemm": [r for r in rows if r["kind"] == "gemm"]}
    dev = next((r.get("device") for r in rows if "device" in r), "?")
    torch_v = next((r.get("torch") for r in rows if "torch" in r), "?")
    print(f"device: {dev}; PyTorch {torch_v}; batch {B}")
    print(f"{'run':<28}{'samples/s':>14}{'step ms':>10}")
    for k, r in tr.items():
        print(f"{'terarec ' + k:<28}{r['samples_per_s']:>14,.0f}{r['step_ms']:>10.2f}")
    for k, r in pt.items():
        print(f"{'pytorch ' + k:<28}{r['samples_per_s']:>14,.0f}{r['step_ms']:>10.2f}")
    if tr:
        names = list(next(iter(tr.values()))["phases"].keys())
        print("\nterarec phase split, ms per step (warm steps):")
        print(f"{'':<10}" + "".join(f"{nm[:12]:>13}" for nm in names))
        for k, r in tr.items():
            print(f"{k:<10}" + "".join(f"{r['phases'].get(nm, 0):>13.3f}" for nm in names))
    best = max(pt.values(), key=lambda r: r["samples_per_s"], default=None)
    amp = tr.get("amp-bf16")
    if amp and best:
        ratio = amp["samples_per_s"] / best["samples_per_s"]
        print(f"\nterarec --amp / PyTorch's best ({best['mode']}): {ratio:.2f}x "
              f"(goal >= 2x: {'met' if ratio >= 2 else 'NOT met'})")
    elif amp:
        print("\nterarec --amp / PyTorch's best: no PyTorch row")
    if lim["gather"]:
        g = lim["gather"]
        print(f"\nlimits: random {g['row_bytes']}-byte row gathers {g['rows_per_s'] / 1e9:.2f} G rows/s "
              f"({g['bytes_per_s'] / 1e12:.2f} TB/s read+write)")
    if lim["copy"]:
        print(f"  device copy {lim['copy']['bytes_per_s'] / 1e12:.2f} TB/s read+write")
    if lim["h2d"]:
        print(f"  host to device (page-locked) {lim['h2d']['bytes_per_s'] / 1e9:.1f} GB/s")
    for prec in ("fp32", "tf32", "bf16", "fp16"):
        g = [r for r in lim["gemm"] if r["prec"] == prec]
        if g:
            t = sum(3 * 2 * r["m"] * r["k"] * r["n"] / (r["tflops"] * 1e12) for r in g)
            print(f"  {prec}: the model's GEMMs (forward and backward) {t * 1e3:.2f} ms per step at the measured "
                  f"rates (best shape {max(r['tflops'] for r in g):.0f} TFLOP/s)")
    for k, r in tr.items():
        f = floors(B, lim, PREC.get(k, "fp32"))
        known = {p: v for p, v in f.items() if v is not None}
        if not known:
            continue
        floor = sum(known.values())
        print(f"  terarec {k}: floor {floor:.2f} ms vs {r['step_ms']:.2f} ms measured: "
              f"{floor / r['step_ms'] * 100:.0f}% of the roofline")
    if amp:
        f = floors(B, lim, "bf16")
        gaps = sorted(((amp["phases"].get(p, 0.0) - v, p, v) for p, v in f.items() if v is not None), reverse=True)
        if gaps:
            print("\nterarec --amp: the phases furthest above their floors (ms per step over the floor):")
            for gap, p, v in gaps[:3]:
                print(f"  {p:<14}{amp['phases'].get(p, 0.0):>8.3f} ms measured, floor {v:.3f} ms: +{gap:.3f} ms")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "row":
        row(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "table":
        table(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit("usage: gpu_bench_report.py row LOG MODE | table RESULTS BATCH")


if __name__ == "__main__":
    main()
