#!/usr/bin/env python3
"""multihot_ref.py ONEHOT_DIR MULTIHOT_DIR SIZES [SEED]

Checks `terarec data prepare --multi_hot_sizes SIZES` against MLPerf's DLRM-DCNv2
reference rule, written here from the reference (facebookresearch/dlrm
torchrec_dlrm/multi_hot.py, Multihot.__make_multi_hot_indices_tables, which
materialize_synthetic_multihot_dataset.py applies to one-hot Criteo), with numpy
only: np.random.seed(SEED) once, then per table in order, of R rows and size h,
lookup = concatenate(arange(R)[:, None], np.random.randint(0, R, size=(R, h - 1)))
(uniform distribution), and every one-hot id r of the table becomes lookup[r].
ONEHOT_DIR is the same data prepared without --multi_hot_sizes. Every cat_<t>.bin
of both splits must hold those ids byte for byte, and feature_spec.yaml must give
each table of h > 1 hotness h (format_version 2). Prints one line per check and
exits 1 on the first failure."""
import os
import re
import sys

import numpy as np


def cards_and_hot(spec_path):
    """cat_<t>.bin -> (cardinality, dtype, hotness) from a feature_spec.yaml as
    terarec writes it (one flow mapping a feature)."""
    out = {}
    for line in open(spec_path):
        m = re.match(r"\s+cat_(\d+)\.bin: \{(.*)\}", line)
        if not m:
            continue
        kv = dict(p.split(": ") for p in m.group(2).split(", "))
        out[int(m.group(1))] = (int(kv["cardinality"]), kv["dtype"], int(kv.get("hotness", "1")))
    return [out[t] for t in sorted(out)]


def main():
    onehot, multihot, sizes = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3].split(",")]
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    one = cards_and_hot(os.path.join(onehot, "feature_spec.yaml"))
    many = cards_and_hot(os.path.join(multihot, "feature_spec.yaml"))
    spec = open(os.path.join(multihot, "feature_spec.yaml")).read()
    if "format_version: 2" not in spec:
        sys.exit("FAIL feature_spec.yaml of the multi-hot dataset has no format_version: 2")
    if len(sizes) != len(one):
        sys.exit("FAIL %d sizes for %d tables" % (len(sizes), len(one)))
    np.random.seed(seed)
    nids = 0
    for t, ((rows, dtype, _), h) in enumerate(zip(one, sizes)):
        # the reference's lookup of table t: the id itself, then h - 1 draws
        ids = np.arange(rows)[:, np.newaxis]
        synthetic = np.random.randint(0, rows, size=(rows, h - 1))
        lookup = np.concatenate((ids, synthetic), axis=-1).astype(np.int32)
        want_hot = h if h > 1 else 1
        if many[t] != (rows, dtype, want_hot):
            sys.exit("FAIL cat_%d: the multi-hot spec says %s, expected %s" % (t, many[t], (rows, dtype, want_hot)))
        for split in ("train", "test"):
            a = np.fromfile(os.path.join(onehot, split, "cat_%d.bin" % t), dtype=dtype)
            b = np.fromfile(os.path.join(multihot, split, "cat_%d.bin" % t), dtype=dtype)
            want = lookup[a.astype(np.int64)].astype(dtype).reshape(-1)
            if b.shape != want.shape or not np.array_equal(b, want):
                bad = next((i for i in range(min(len(b), len(want))) if b[i] != want[i]), min(len(b), len(want)))
                sys.exit("FAIL %s/cat_%d.bin: %d ids, expected %d; first difference at id %d (sample %d)"
                         % (split, t, len(b), len(want), bad, bad // h))
            nids += len(b)
    print("ok %d tables, %d ids: MLPerf's multi-hot rule (RandomState(%d), uniform), byte for byte"
          % (len(one), nids, seed))


if __name__ == "__main__":
    main()
