#!/usr/bin/env python3
"""compare_runs.py REF_DIR RUN_DIR [--rtol R] [--wtol R] [--bitwise] [--mp-top0=K] [--steps-after=K] [--no-losses]

Compares a multi-worker training run with a reference run of the same model:
  * the loss of every logged step (REF_DIR/log.json, RUN_DIR/log.json, DLLogger lines);
  * the weights written by terarec-worker --dump_weights (DIR/rank<r>.bin): every
    table is reassembled from the column slices or whole tables of all ranks, the
    dense parameters are taken from rank 0 and checked identical on every rank
    (the data-parallel replicas; with --mp-bottom only the top MLP part, whose
    offset is given by the reference's bottom size);
  * the optimizer state in the same way when the dumps hold it (version 2):
    per-element Adagrad state like its table, row-wise Adagrad state (one value
    per row) checked identical on every rank holding a slice of the table.
With --steps-after=K only the losses of steps after K are compared (a run resumed
from a checkpoint of step K logs those only); --no-losses compares weights only.
Losses pass when each differs by at most rtol (relative, default 1e-5); each
weight tensor when ||run - ref|| / ||ref|| <= wtol (default 1e-5); with --bitwise
only equal bytes pass. Prints one line per check; exits 1 on any failure.
Only the Python standard library is used (struct, json)."""
import glob
import json
import math
import os
import struct
import sys


def losses(path):
    out = {}
    for line in open(path):
        if not line.startswith("DLLL "):
            continue
        r = json.loads(line[5:])
        if isinstance(r["step"], int) and "loss" in r["data"]:
            out[r["step"]] = r["data"]["loss"]
    return out


def read_rank(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, rank, world, ntables, _, nparams = struct.unpack_from("<6IQ", data, 0)
    if magic != 0x44575254 or version not in (1, 2):
        sys.exit("%s: not a terarec weight dump" % path)
    has_dense_state = version >= 2 and _ == 1
    off = 32
    dense = struct.unpack_from("<%df" % nparams, data, off)
    off += 4 * nparams
    dense_state = None
    if has_dense_state:
        dense_state = struct.unpack_from("<%df" % nparams, data, off)
        off += 4 * nparams
    tables = {}
    states = {}
    while off < len(data):
        tid, kind, rows, col0, width = struct.unpack_from("<2i3q", data, off)
        off += 32
        vals = struct.unpack_from("<%df" % (rows * width), data, off)
        off += 4 * rows * width
        tables[tid] = (rows, col0, width, vals)
        if version >= 2 and kind:
            n = rows * width if kind == 1 else rows
            states[tid] = (kind, rows, col0, width, struct.unpack_from("<%df" % n, data, off))
            off += 4 * n
    return rank, world, ntables, dense, tables, dense_state, states


def load(d):
    files = sorted(glob.glob(os.path.join(d, "rank*.bin")))
    if not files:
        sys.exit("%s: no rank*.bin" % d)
    ranks = [read_rank(f) for f in files]
    world = ranks[0][1]
    if len(ranks) != world:
        sys.exit("%s: %d files for a world of %d" % (d, len(ranks), world))
    ntables = ranks[0][2]

    def assemble(parts):  # {tid: (rows, col0, width, vals)} of every rank -> {tid: rows of {col: v}}
        full = {}
        for tables in parts:
            for tid, (rows, col0, width, vals) in tables.items():
                if tid not in full:
                    full[tid] = [None] * rows
                t = full[tid]
                for r in range(rows):
                    row = t[r] if t[r] is not None else {}
                    for c in range(width):
                        row[col0 + c] = vals[r * width + c]
                    t[r] = row
        return full
    full = assemble([r[4] for r in ranks])
    # optimizer state: per element like the tables; per row (kind 2) one replica
    # per rank holding the table, which must all be equal
    elem = assemble([{tid: st[1:] for tid, st in r[6].items() if st[0] == 1} for r in ranks])
    state = {tid: ("element", [[v for _, v in sorted(row.items())] for row in t]) for tid, t in elem.items()}
    problems = []
    for rank, _, _, _, _, _, states in ranks:
        for tid, (kind, rows, col0, width, vals) in states.items():
            if kind != 2:
                continue
            if tid in state and state[tid][0] == "row" and tuple(state[tid][1]) != tuple(vals):
                problems.append("rank %d's row-wise state of table %d differs from another rank's" % (rank, tid))
            state.setdefault(tid, ("row", vals))
    dense = {r[0]: r[3] for r in ranks}
    dense_state = {r[0]: r[5] for r in ranks}
    return world, ntables, dense, full, dense_state, state, problems


def rel(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    rtol = wtol = 1e-5
    for i, a in enumerate(sys.argv):
        if a in ("--rtol", "--wtol"):
            if a == "--rtol":
                rtol = float(sys.argv[i + 1])
            else:
                wtol = float(sys.argv[i + 1])
            args.remove(sys.argv[i + 1])
    bitwise = "--bitwise" in sys.argv
    mp_top0 = None
    for a in sys.argv:
        if a.startswith("--mp-top0="):
            mp_top0 = int(a.split("=")[1])
    after = None
    for a in sys.argv:
        if a.startswith("--steps-after="):
            after = int(a.split("=")[1])
    no_losses = "--no-losses" in sys.argv
    ref_dir, run_dir = args[0], args[1]
    failed = 0
    worst = 0.0

    def compare(what, got, want):
        """One weight comparison, bitwise or within wtol; counts a failure."""
        nonlocal worst, failed
        if len(got) != len(want):
            print("FAIL %s: %d values vs %d" % (what, len(got), len(want)))
            failed += 1
            return
        e = rel(got, want)
        ok = (list(got) == list(want)) if bitwise else e <= wtol
        worst = max(worst, e)
        print("%s %s (%d values): relative difference %.3g" % ("ok  " if ok else "FAIL", what, len(want), e))
        failed += not ok

    lr, lx = losses(os.path.join(ref_dir, "log.json")), losses(os.path.join(run_dir, "log.json"))
    if after is not None:
        lr = {s: v for s, v in lr.items() if s > after}
        lx = {s: v for s, v in lx.items() if s > after}
    if no_losses:
        pass
    elif sorted(lr) != sorted(lx) or not lr:
        print("FAIL loss steps differ: %s vs %s" % (sorted(lr)[:5], sorted(lx)[:5]))
        failed += 1
    else:
        e = max(abs(lx[s] - lr[s]) / abs(lr[s]) for s in lr)
        same = all(lx[s] == lr[s] for s in lr)
        ok = same if bitwise else e <= rtol
        worst = max(worst, e)
        print("%s losses of %d steps: worst relative difference %.3g%s" %
              ("ok  " if ok else "FAIL", len(lr), e, " (bitwise equal)" if same else ""))
        failed += not ok

    wr, nt, dr, tr, dsr, sr, _ = load(ref_dir)
    wx, ntx, dx, tx, dsx, sx, problems = load(run_dir)
    for p in problems:
        print("FAIL " + p)
        failed += 1
    ref_dense = dr[0]
    x0 = dx[0]
    # replicas: every rank holds the same data-parallel parameters
    lo = mp_top0 or 0
    for r, d in dx.items():
        if tuple(d[lo:]) != tuple(x0[lo:]):
            print("FAIL rank %d's data-parallel parameters differ from rank 0's" % r)
            failed += 1
    compare("dense parameters", x0, ref_dense)
    for tid in sorted(tr):
        a = tr[tid]
        b = tx.get(tid)
        if b is None or len(b) != len(a) or any(row is None for row in b):
            print("FAIL table %d missing or incomplete in %s" % (tid, run_dir))
            failed += 1
            continue
        compare("table %d" % tid, [v for row in b for _, v in sorted(row.items())],
                [v for row in a for _, v in sorted(row.items())])
    # optimizer state, where the reference has it
    lo = mp_top0 or 0
    if dsr[0] is not None:
        if dsx[0] is None:
            print("FAIL dense optimizer state missing in %s" % run_dir)
            failed += 1
        else:
            for r, d in dsx.items():
                if d is None or tuple(d[lo:]) != tuple(dsx[0][lo:]):
                    print("FAIL rank %d's dense optimizer state differs from rank 0's" % r)
                    failed += 1
            compare("dense optimizer state", dsx[0], dsr[0])
    for tid in sorted(sr):
        kind, a = sr[tid]
        if tid not in sx or sx[tid][0] != kind:
            print("FAIL table %d: %s-wise optimizer state missing or of another kind in %s" % (tid, kind, run_dir))
            failed += 1
            continue
        b = sx[tid][1]
        flat = (lambda t: [v for row in t for v in row]) if kind == "element" else list
        compare("table %d %s-wise optimizer state" % (tid, kind), flat(b), flat(a))
    print("worst relative difference %.3g (bounds: losses %g, weights %g)" % (worst, rtol, wtol))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
