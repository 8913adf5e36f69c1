#!/usr/bin/env python3
"""prepare_ref.py: an independent, slow reference of `terarec data prepare`
written from the format rules alone (no code shared with the C version), for the
integration tests.

  prepare_ref.py write [--numerical_transform=nvidia|log1p] [--hash_missing=shared|reserved]
                       MODE ARG SPLIT SPLITARG OUT INPUT...
      MODE hash (ARG = M) or threshold (ARG = T); SPLIT files (SPLITARG = K) or
      fraction (SPLITARG = F). Writes OUT/{train,test}/*.bin without shuffling and
      prints the 26 cardinalities, comma-separated. Numerical: nvidia ln(x + 3)
      (x <= -3 and missing give 0), log1p ln(1 + max(x, 0)) (missing gives 0).
      Hash: shared id = h % M (missing 0), reserved id = 1 + h % (M - 1) (missing 0).
      Threshold: values counted on the training rows only; kept values (count >= T)
      get 1..K by descending count, ties by ascending value; the rest (missing,
      rare, seen only in test) give 0.
  prepare_ref.py perm DIR_UNSHUFFLED DIR_SHUFFLED SEED
      exits 0 when DIR_SHUFFLED/train is DIR_UNSHUFFLED/train in the documented
      order: row g by ascending mix(g + mix(seed + 0x9e3779b97f4a7c15)).
  prepare_ref.py rows DIR
      prints "train_rows test_rows" (label.bin sizes).
Plain text only (gzip is the C side's business; the tests compare .gz against plain).
"""
import collections
import math
import os
import re
import struct
import sys

FILES = ["label.bin", "numerical.bin"] + ["cat_%d.bin" % i for i in range(26)]
M64 = (1 << 64) - 1
INT = re.compile(rb"\A([+-]?[0-9]+)?\Z")      # empty = missing
HEX = re.compile(rb"\A[0-9a-fA-F]{0,16}\Z")


def half_bits(d):
    """float16 bits of double d, rounded to float32 first, then to float16."""
    f = struct.unpack("<f", struct.pack("<f", d))[0]
    return struct.unpack("<H", struct.pack("<e", f))[0]


def half_of_ln(x):
    """the seed's rule: ln(x + 3); missing and x <= -3 give 0."""
    if x is None or x + 3 <= 0:
        return 0
    return half_bits(math.log(x + 3))


def half_of_log1p(x):
    """facebookresearch/dlrm's rule: ln(1 + max(x, 0)); missing gives 0."""
    return half_bits(math.log1p(max(x or 0, 0)))


def read_rows(paths):
    rows = []
    for fi, p in enumerate(paths):
        with open(p, "rb") as fh:
            for line in fh.read().split(b"\n"):
                if line.endswith(b"\r"):
                    line = line[:-1]
                if not line:
                    continue
                f = line.split(b"\t")
                if len(f) != 40 or f[0] not in (b"0", b"1"):
                    continue
                if not all(INT.match(v) for v in f[1:14]) or not all(HEX.match(v) for v in f[14:]):
                    continue
                ints = [int(v) if v else None for v in f[1:14]]
                cats = [int(v, 16) if v else None for v in f[14:]]
                if any(x is not None and not -(1 << 63) <= x < (1 << 63) for x in ints):
                    continue
                rows.append((fi, int(f[0]), ints, cats))
    return rows


def write(mode, arg, split, splitarg, out, paths, numerical="nvidia", missing="shared"):
    rows = read_rows(paths)
    num = {"nvidia": half_of_ln, "log1p": half_of_log1p}[numerical]
    if split == "files":
        k = int(splitarg)
        first_test = len(paths) - k
        train = [r for r in rows if r[0] < first_test]
        test = [r for r in rows if r[0] >= first_test]
    else:
        ntest = int(math.floor(float(splitarg) * len(rows) + 0.5))
        train, test = rows[: len(rows) - ntest], rows[len(rows) - ntest:]
    if mode == "hash":
        m = int(arg)
        card = [m] * 26
        if missing == "reserved":
            ident = lambda i, v: 0 if v is None else 1 + v % (m - 1)
        else:
            ident = lambda i, v: 0 if v is None else v % m
    else:
        t = max(1, int(arg))
        counts = [collections.Counter() for _ in range(26)]
        for r in train:
            for i, v in enumerate(r[3]):
                if v is not None:
                    counts[i][v] += 1
        dicts = []
        for i in range(26):
            kept = sorted((-c, v) for v, c in counts[i].items() if c >= t)
            dicts.append({v: k + 1 for k, (_, v) in enumerate(kept)})
        card = [len(d) + 1 for d in dicts]
        ident = lambda i, v: 0 if v is None else dicts[i].get(v, 0)
    fmt = ["<b" if c < 127 else "<h" if c < 32767 else "<i" for c in card]
    for name, part in (("train", train), ("test", test)):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "label.bin"), "wb") as fh:
            fh.write(bytes(r[1] for r in part))
        with open(os.path.join(d, "numerical.bin"), "wb") as fh:
            fh.write(b"".join(struct.pack("<13H", *[num(x) for x in r[2]]) for r in part))
        for i in range(26):
            with open(os.path.join(d, "cat_%d.bin" % i), "wb") as fh:
                fh.write(b"".join(struct.pack(fmt[i], ident(i, r[3][i])) for r in part))
    print(",".join(str(c) for c in card))


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def perm(plain, shuffled, seed):
    n = os.path.getsize(os.path.join(plain, "train", "label.bin"))
    s = mix((seed + 0x9E3779B97F4A7C15) & M64)
    order = sorted(range(n), key=lambda g: mix((g + s) & M64))
    for f in FILES:
        a = open(os.path.join(plain, "train", f), "rb").read()
        b = open(os.path.join(shuffled, "train", f), "rb").read()
        w = len(a) // n if n else 0
        if len(a) != len(b) or b"".join(a[g * w:(g + 1) * w] for g in order) != b:
            print("%s: not the documented permutation" % f)
            return 1
    return 0


def main():
    cmd = sys.argv[1]
    if cmd == "write":
        args, kw = sys.argv[2:], {}
        while args and args[0].startswith("--"):
            k, v = args.pop(0)[2:].split("=", 1)
            kw[{"numerical_transform": "numerical", "hash_missing": "missing"}[k]] = v
        write(*args[:5], args[5:], **kw)
        return 0
    if cmd == "perm":
        return perm(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    if cmd == "rows":
        d = sys.argv[2]
        print(os.path.getsize(os.path.join(d, "train", "label.bin")),
              os.path.getsize(os.path.join(d, "test", "label.bin")))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
