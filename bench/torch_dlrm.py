#!/usr/bin/python3
# torch_dlrm.py: the DLRM of worker/dlrm.h in PyTorch (nn.EmbeddingBag + nn.Linear,
# dot interaction as the seed, BCE-with-logits, plain SGD with sparse embedding grads),
# timed on the configs of bench/bench_train.c for comparison; dcnv2_mlperf is the twin of
# terarec's --preset dlrm_dcnv2_mlperf (MLPerf's DLRM-DCNv2: multi-hot bags of fixed
# sizes summed by nn.EmbeddingBag with offsets, three low-rank cross layers as TorchRec's
# LowRankCrossNet, Adagrad with sparse embedding grads). Run it with /usr/bin/python3
# (Debian's torch). It does not check numerical parity with terarec; only speed.
import os

os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # before torch creates its OpenMP pool

import argparse
import json
import math
import mmap
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_FEATURES = 13
NUM_LD = 16  # numerical input padded 13 -> 16, as the model does
CARD_CAP = 4_000_000
CRITEO_KAGGLE_CARDS = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
                       27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]

# name: (rows per table or None for Criteo Kaggle capped, dim, bottom, top, ids, steps, warmup)
CONFIGS = {
    "tiny": (100000, 16, [512, 256, 16], [512, 256, 1], "powerlaw", 100, 10),
    "mlperf": (None, 128, [512, 256, 128], [1024, 1024, 512, 256, 1], "powerlaw", 30, 5),
    "embbound": (2000000, 64, [64, 64], [64, 1], "uniform", 300, 20),
    "dcnv2_mlperf": ("mlperf", 128, [512, 256, 128], [1024, 1024, 512, 256, 1], "powerlaw", 20, 3),
}
# dcnv2_mlperf: common/job_preset.c's values (MLPerf's reference, traced there), the
# tables capped at 500 k rows as bench_train.c does
MLPERF_CARDS = [40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10, 2209,
                11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36]
MLPERF_HOT = [3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1]
MLPERF_CAP = 500_000
DCN_LAYERS, DCN_RANK = 3, 512
ADAGRAD_LR, ADAGRAD_EPS, ADAGRAD_INIT = 0.005, 1e-10, 0.0

CHUNK_ROWS = 1 << 20


def table_weight(rows, dim, keep):
    """A (rows, dim) float32 tensor on anonymous private memory advised for transparent
    huge pages (as terarec's tr_big_alloc does), filled U(+-sqrt(1/rows)) in chunks."""
    nbytes = rows * dim * 4
    mm = mmap.mmap(-1, max(nbytes, 4), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE") and nbytes >= 32 << 20:
        mm.madvise(mmap.MADV_HUGEPAGE)
    keep.append(mm)
    w = torch.frombuffer(mm, dtype=torch.float32, count=rows * dim).view(rows, dim)
    bound = math.sqrt(1.0 / rows)
    for r0 in range(0, rows, CHUNK_ROWS):
        w[r0:r0 + CHUNK_ROWS].uniform_(-bound, bound)
    return w


class DCNv2(nn.Module):
    """MLPerf's DLRM-DCNv2: bottom MLP, multi-hot tables summed, x0 = [bottom | tables]
    through DCN_LAYERS low-rank cross layers x_{l+1} = x0 * U(V x_l) + x_l, then the top MLP."""

    def __init__(self, cards, dim, bottom, top, keep):
        super().__init__()
        self.embs = nn.ModuleList(
            nn.EmbeddingBag(c, dim, mode="sum", sparse=True, _weight=table_weight(c, dim, keep)) for c in cards)
        self.order = sorted(range(len(cards)), key=lambda t: (-cards[t], t))
        layers, w = [], NUM_LD
        for o in bottom:
            layers += [nn.Linear(w, o), nn.ReLU()]
            w = o
        self.bottom = nn.Sequential(*layers)
        w = (len(cards) + 1) * dim
        self.v = nn.ModuleList(nn.Linear(w, DCN_RANK, bias=False) for _ in range(DCN_LAYERS))
        self.u = nn.ModuleList(nn.Linear(DCN_RANK, w) for _ in range(DCN_LAYERS))
        layers = []
        for i, o in enumerate(top):
            layers.append(nn.Linear(w, o))
            if i + 1 < len(top):
                layers.append(nn.ReLU())
            w = o
        self.top = nn.Sequential(*layers)

    def forward(self, num, cat):
        x = self.bottom(num)
        e = [self.embs[t](*cat[t]) for t in range(len(self.embs))]
        x0 = torch.cat([x] + [e[t] for t in self.order], dim=1)
        xl = x0
        for v, u in zip(self.v, self.u):
            xl = x0 * u(v(xl)) + xl
        return self.top(xl).squeeze(1)


class DLRM(nn.Module):
    def __init__(self, cards, dim, bottom, top, keep):
        super().__init__()
        self.embs = nn.ModuleList(
            nn.EmbeddingBag(c, dim, mode="sum", sparse=True, _weight=table_weight(c, dim, keep)) for c in cards)
        # interaction rows: bottom output, then tables by cardinality desc (stable)
        self.order = sorted(range(len(cards)), key=lambda t: (-cards[t], t))
        layers, w = [], NUM_LD
        for o in bottom:
            layers += [nn.Linear(w, o), nn.ReLU()]
            w = o
        self.bottom = nn.Sequential(*layers)
        n = len(cards) + 1
        li, lj = torch.tril_indices(n, n, offset=-1)  # row-major strict lower triangle
        self.register_buffer("li", li)
        self.register_buffer("lj", lj)
        used = dim + n * (n - 1) // 2
        self.pad = (used + 7) // 8 * 8 - used
        layers, w = [], used + self.pad
        for i, o in enumerate(top):
            layers.append(nn.Linear(w, o))
            if i + 1 < len(top):
                layers.append(nn.ReLU())
            w = o
        self.top = nn.Sequential(*layers)

    def forward(self, num, cat):
        x = self.bottom(num)
        e = [self.embs[t](cat[t]) for t in range(len(self.embs))]
        X = torch.stack([x] + [e[t] for t in self.order], dim=1)  # (B, n, D)
        Z = torch.bmm(X, X.transpose(1, 2))
        out = torch.cat([x, Z[:, self.li, self.lj]], dim=1)
        if self.pad:
            out = F.pad(out, (0, self.pad))
        return self.top(out).squeeze(1)


def make_batches(cards, ids, batch, nbatches, gen, hot=None):
    """hot: ids a sample of each table (multi-hot: a bag of h ids, given as (ids, offsets))."""
    out = []
    for _ in range(nbatches):
        num = torch.zeros(batch, NUM_LD)
        num[:, :NUM_FEATURES] = 2.0 * torch.rand(batch, NUM_FEATURES, generator=gen)
        labels = (torch.rand(batch, generator=gen) < 0.5).float()
        cat = []
        for t, c in enumerate(cards):
            h = hot[t] if hot else 1
            if ids == "uniform":
                v = torch.randint(c, (batch * h,), generator=gen)
            else:  # log-uniform, as kmath.h km_powerlaw_id
                u = torch.rand(batch * h, generator=gen, dtype=torch.float64)
                v = (torch.exp(u * math.log(c + 1.0)) - 1.0).long().clamp_(0, c - 1)
            if hot:
                cat.append((v, torch.arange(0, batch * h, h)))  # bags of h ids, by offsets
            else:
                cat.append(v.view(batch, 1))  # one id per bag
        out.append((num, labels, cat))
    return out


def run_config(name, a):
    rows, dim, bottom, top, ids, steps, warmup = CONFIGS[name]
    steps = a.steps if a.steps > 0 else steps
    warmup = a.warmup if a.warmup >= 0 else warmup
    dcn = rows == "mlperf"
    if dcn:
        base = [min(c, MLPERF_CAP) for c in MLPERF_CARDS]
    else:
        base = [rows] * 26 if rows else [min(c, CARD_CAP) for c in CRITEO_KAGGLE_CARDS]
    cards = [max(c // a.scale, 1) for c in base]
    print(f"\n== {name} (PyTorch {torch.__version__}, {torch.get_num_threads()} threads, OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY')}): {sum(cards)} rows, dim {dim}, bottom {bottom}, top {top}, "
          f"{ids} ids, batch {a.batch_size}", flush=True)
    torch.manual_seed(42)
    keep = []
    t0 = time.perf_counter()
    model = (DCNv2 if dcn else DLRM)(cards, dim, bottom, top, keep)
    init_s = time.perf_counter() - t0
    if dcn:
        opt = torch.optim.Adagrad(model.parameters(), lr=ADAGRAD_LR, eps=ADAGRAD_EPS,
                                  initial_accumulator_value=ADAGRAD_INIT)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    gen = torch.Generator().manual_seed(1234)
    batches = make_batches(cards, ids, a.batch_size, a.batches, gen, MLPERF_HOT if dcn else None)
    print(f"model: embeddings {sum(cards) * dim * 4 / 2**20:.1f} MiB; init {init_s:.1f} s", flush=True)

    def step(k, tm):
        num, labels, cat = batches[k % len(batches)]
        t_a = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.binary_cross_entropy_with_logits(model(num, cat), labels)
        t_b = time.perf_counter()
        loss.backward()
        t_c = time.perf_counter()
        opt.step()
        t_d = time.perf_counter()
        tm[0] += t_b - t_a
        tm[1] += t_c - t_b
        tm[2] += t_d - t_c
        return loss.item()

    tm = [0.0, 0.0, 0.0]
    loss_first = None
    for k in range(warmup):
        loss = step(k, tm)
        loss_first = loss if loss_first is None else loss_first
    tm = [0.0, 0.0, 0.0]
    per_step = []
    t0 = time.perf_counter()
    for k in range(steps):
        ts = time.perf_counter()
        loss = step(warmup + k, tm)
        per_step.append(time.perf_counter() - ts)
        loss_first = loss if loss_first is None else loss_first
    dt = time.perf_counter() - t0
    per_step.sort()
    res = {
        "name": name, "cards": cards, "emb_dim": dim, "bottom": bottom, "top": top, "ids": ids,
        "hotness": MLPERF_HOT if dcn else None, "optimizer": "adagrad" if dcn else "sgd",
        "batch_size": a.batch_size, "threads": torch.get_num_threads(), "scale": a.scale, "steps": steps,
        "warmup": warmup, "init_s": init_s, "samples_per_s": a.batch_size * steps / dt,
        "ms_per_step": 1e3 * dt / steps, "step_ms_min": 1e3 * per_step[0],
        "step_ms_median": 1e3 * per_step[steps // 2], "step_ms_max": 1e3 * per_step[-1], "fwd_loss_ms": 1e3 * tm[0] / steps, "bwd_ms": 1e3 * tm[1] / steps,
        "opt_ms": 1e3 * tm[2] / steps, "loss_first": loss_first, "loss_last": loss,
    }
    print(f"train: {steps} timed steps after {warmup} warm-up: {res['ms_per_step']:.2f} ms/step, "
          f"{res['samples_per_s']:.0f} samples/s (loss {loss_first:.4f} -> {loss:.4f})")
    print(f"  one step: min {res['step_ms_min']:.2f}, median {res['step_ms_median']:.2f}, max "
          f"{res['step_ms_max']:.2f} ms (median-step rate {a.batch_size / per_step[steps // 2]:.0f}"
          " samples/s)")
    print(f"split (ms/step): forward+loss {res['fwd_loss_ms']:.2f}, backward {res['bwd_ms']:.2f}, "
          f"{'Adagrad' if dcn else 'SGD'} step {res['opt_ms']:.2f}", flush=True)
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__ or "PyTorch DLRM training-step benchmark")
    p.add_argument("--config", choices=list(CONFIGS) + ["all"], default="all")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=2048)
    p.add_argument("--steps", type=int, default=0, help="timed steps (0: per config)")
    p.add_argument("--warmup", type=int, default=-1, help="untimed steps (-1: per config)")
    p.add_argument("--scale", type=int, default=1, help="divide every table's rows by this")
    p.add_argument("--batches", type=int, default=32, help="distinct pre-generated batches")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--json", help="write results to this file")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    names = list(CONFIGS) if a.config == "all" else [a.config]
    results = [run_config(n, a) for n in names]
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"bench": "torch_dlrm", "torch": torch.__version__, "threads": torch.get_num_threads(),
                       "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "configs": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
