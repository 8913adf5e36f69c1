#!/usr/bin/python3
# torch_dlrm_gpu.py: the seed's single-GPU DLRM in PyTorch on one CUDA device, as the
# reference for bench/gpu_train_bench.sh: nn.EmbeddingBag (sum, sparse gradients) for
# the 26 Criteo Kaggle tables, nn.Linear MLPs, the dot interaction, BCE with logits,
# SGD; ids uniform per table and already on the GPU (a ring of batches), so only the
# training step is timed. Modes: eager fp32 (TF32 on, PyTorch's fast default for
# matmuls is set explicitly), eager with torch.autocast(bf16), and either with the
# MLPs under torch.compile. --probe measures the machine limits the bench compares
# against in the same run: random-row gathers of dim*4-byte rows, a device-to-device
# copy (memory bandwidth), a page-locked host-to-device copy and the GEMM TFLOP/s of
# the model's MLP shapes (fp32, TF32, bf16, fp16). One JSON line per result.
# It does not check numerics against terarec; only speed.
import argparse
import json
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CRITEO_KAGGLE_CARDS = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
                       27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572]


def mlp(sizes, last_relu):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes) or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, cards, dim, bottom, top):
        super().__init__()
        self.embs = nn.ModuleList(nn.EmbeddingBag(c, dim, mode="sum", sparse=True) for c in cards)
        self.bottom = mlp([13] + bottom, True)
        n = len(cards) + 1
        self.tri = torch.tril_indices(n, n, -1)
        self.top = mlp([dim + n * (n - 1) // 2] + top, False)

    def forward(self, num, cat):
        x = self.bottom(num)
        e = [emb(cat[:, t].view(-1, 1)) for t, emb in enumerate(self.embs)]
        v = torch.stack([x] + e, dim=1)                     # (B, n, D)
        z = torch.bmm(v, v.transpose(1, 2))                 # (B, n, n)
        pairs = z[:, self.tri[0], self.tri[1]]              # (B, n(n-1)/2)
        return self.top(torch.cat([x, pairs], dim=1)).squeeze(1)


def bench_train(a, dev):
    cards = [min(c, a.card_cap) if a.card_cap else c for c in CRITEO_KAGGLE_CARDS]
    torch.manual_seed(1)
    m = DLRM(cards, a.dim, a.bottom, a.top).to(dev)
    m.tri = m.tri.to(dev)
    if a.compile:
        m.bottom = torch.compile(m.bottom)
        m.top = torch.compile(m.top)
    opt_dense = torch.optim.SGD([p for n_, p in m.named_parameters() if not n_.startswith("embs")], lr=a.lr)
    opt_sparse = torch.optim.SGD(m.embs.parameters(), lr=a.lr)
    ring = 4
    nums = torch.randn(ring, a.batch, 13, device=dev)
    cats = torch.stack([torch.randint(0, c, (ring, a.batch), device=dev) for c in cards], dim=2)
    labels = (torch.rand(ring, a.batch, device=dev) < 0.25).float()
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if a.amp == "bf16" else torch.autocast("cuda", enabled=False)

    def step(i):
        k = i % ring
        with amp:
            logits = m(nums[k], cats[k])
        loss = F.binary_cross_entropy_with_logits(logits.float(), labels[k])
        opt_dense.zero_grad(set_to_none=True)
        opt_sparse.zero_grad(set_to_none=True)
        loss.backward()
        opt_dense.step()
        opt_sparse.step()
        return loss

    for i in range(a.warmup):
        step(i)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(a.steps):
        step(i)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return {"kind": "train", "mode": ("compiled" if a.compile else "eager") + "-" + a.amp,
            "samples_per_s": a.batch * a.steps / dt, "step_ms": dt / a.steps * 1e3}


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


def probe(a, dev):
    out = []
    rows = 33_762_577 if not a.card_cap else 26 * a.card_cap
    tab = torch.empty(rows, a.dim, device=dev).uniform_(-0.01, 0.01)
    n = a.batch * 26
    idx = torch.randint(0, rows, (n,), device=dev)
    t = timed(lambda: torch.index_select(tab, 0, idx), 20)
    out.append({"kind": "gather", "rows_per_s": n / t, "bytes_per_s": 2 * n * a.dim * 4 / t,
                "row_bytes": a.dim * 4})
    del tab
    # device memory bandwidth: a large device-to-device copy, bytes read plus written
    src = torch.empty(1 << 28, device=dev).uniform_(-1, 1)
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src), 20)
    out.append({"kind": "copy", "bytes_per_s": 2 * src.numel() * 4 / t})
    del src, dst
    # host to device from page-locked memory (how a batch reaches the GPU)
    hsrc = torch.empty(1 << 26, pin_memory=True).uniform_(-1, 1)
    ddst = torch.empty(1 << 26, device=dev)
    t = timed(lambda: ddst.copy_(hsrc, non_blocking=True), 20)
    out.append({"kind": "h2d", "bytes_per_s": hsrc.numel() * 4 / t})
    del hsrc, ddst
    n_int = 27 * 26 // 2
    shapes = []
    prev = 13
    for o in a.bottom:
        shapes.append((a.batch, prev, o))
        prev = o
    prev = a.dim + n_int
    for o in a.top:
        shapes.append((a.batch, prev, o))
        prev = o
    for prec in ("fp32", "tf32", "bf16", "fp16"):
        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        dt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec, torch.float32)
        for (mm, kk, nn_) in shapes:
            x = torch.randn(mm, kk, device=dev, dtype=dt)
            w = torch.randn(kk, nn_, device=dev, dtype=dt)
            t = timed(lambda: x @ w, 20)
            out.append({"kind": "gemm", "prec": prec, "m": mm, "k": kk, "n": nn_,
                        "tflops": 2 * mm * kk * nn_ / t / 1e12})
    torch.backends.cuda.matmul.allow_tf32 = True
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=65536)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--bottom", type=lambda s: [int(v) for v in s.split(",")], default=[512, 256, 128])
    p.add_argument("--top", type=lambda s: [int(v) for v in s.split(",")], default=[1024, 1024, 512, 256, 1])
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--amp", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--probe", action="store_true")
    p.add_argument("--card_cap", type=int, default=0, help="cap every table at this many rows (smoke runs)")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("torch_dlrm_gpu: no CUDA device visible to PyTorch", file=sys.stderr)
        sys.exit(1)
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True  # PyTorch's fast fp32 path, as the reference figures
    torch.backends.cudnn.allow_tf32 = True
    res = probe(a, dev) if a.probe else [bench_train(a, dev)]
    for r in res:
        r["device"] = torch.cuda.get_device_name(0)
        r["torch"] = torch.__version__
        print(json.dumps(r))


if __name__ == "__main__":
    main()
