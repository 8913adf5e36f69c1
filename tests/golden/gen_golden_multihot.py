#!/usr/bin/python3
"""gen_golden_multihot.py: writes tests/golden/dlrm_multihot.gold, the PyTorch
reference the C trainer's multi-hot path is checked against
(tests/golden/test_golden_multihot.c). Run it with Debian's python3
(python3-torch, python3-numpy):

    /usr/bin/python3 tests/golden/gen_golden_multihot.py [--out PATH]

The model is written here from the definitions (MLPerf's DLRM-DCNv2: TorchRec's
EmbeddingBagCollection, nn.EmbeddingBag with offsets, and LowRankCrossNet), not
from the C code. It is computed in float64 from float32-representable inputs and
initial values; tensors are stored as float32, scalars (loss, lr) as float64. The
output is deterministic: two runs give identical bytes.

Model:
  numerical (B, 13) -> zero-pad to (B, 16) -> bottom MLP 16, 8 (Linear+ReLU)
  four tables, cardinalities [30, 7, 50, 7], D = 8, each a bag per sample:
    table 0  fixed hotness 3 (3 ids a sample), sum
    table 1  variable hotness, 0 to 4 ids a sample (empty bags too), mean
    table 2  one-hot (one id a sample)
    table 3  variable hotness, 0 to 2 ids, sum
  a bag of ids i_1..i_k gives sum_j E[i_j] (sum) or that / k (mean); an empty bag
  gives zeros (nn.EmbeddingBag's rule); duplicate ids in a bag count each time
  interaction input X (B, n=5, D): bottom output, then the tables sorted by
  cardinality descending, ties by index ([2, 0, 1, 3])
  DCN_LAYERS low-rank cross layers x_{l+1} = x0 * U_l(V_l(x_l)) + x_l (V: w -> r,
  no bias; U: r -> w with bias), w = n*D, r = DCN_RANK; top MLP 16, 8, 1 on x_L
  loss = mean BCE with logits
  optimizers: SGD p -= lr g; Adagrad acc += g^2, p -= lr g / (sqrt(acc) + eps);
  row-wise Adagrad (tables: acc[r] += mean_c g[r, c]^2, MLPs element-wise); a
  table row changes only when an id of the batch names it
  lr(s) for steps 0, 1, 2: warmup 0, decay_start 1, decay_steps 3 (the seed's rule)

Fixture format: that of dlrm_small.gold (gen_golden.py): header u32 magic
0x444C4F47, u32 version 1, u32 count, u32 0; records u32 name_len, name, u32 dtype
(0 f32, 1 i32, 2 f64), u32 ndim, u64 dims[ndim], data.
Records (all under mh/):
  cfg/cards, cfg/hot (loader_svc/batch.h's hotness: 3, 4, 0, 2), cfg/variable
  (0, 1, 0, 1), cfg/mean (0, 1, 0, 0), cfg/emb_dim, cfg/num_features, cfg/batch,
  cfg/bottom, cfg/top, cfg/cross_layers, cfg/cross_rank, cfg/warmup,
  cfg/decay_start, cfg/decay_steps (i32); cfg/lr_base_sgd, cfg/lr_base_adagrad,
  cfg/adagrad_init, cfg/adagrad_eps (f64)
  batch{k}/numerical (B, 13) f32, batch{k}/labels (B) f32, batch{k}/ids_{t} (ids)
  i32, batch{k}/offsets_{t} (B + 1) i32 (table 2: ids only, B of them), k = 0..2
  init/<p>: bottom_mlp_layer_{l}_kernel (in, out), _bias, cross_layer_{l}_v_kernel
  (w, r), _u_kernel (r, w), _bias (w), top_mlp_layer_{l}_kernel, _bias, table_{t}
  fwd/interaction_input (B, n, D), fwd/interaction_output (B, w), fwd/logits (B),
  fwd/loss (1) f64 -- initial weights, batch 0
  grad/<p> (table_{t}: dense, untouched rows 0), grad/interaction_input (B, n, D)
  {sgd,adagrad,rowwise_adagrad}/lr, /loss (3) f64; .../after3/<p>;
  adagrad/after3/accum_<p>, rowwise_adagrad/after3/accum_<p> (tables: (rows))
"""
import argparse
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

MAGIC = 0x444C4F47
VERSION = 1
DT_F32, DT_I32, DT_F64 = 0, 1, 2

SEED = 20250808
CARDS = [30, 7, 50, 7]
HOT = [3, 4, 0, 2]          # batch.h's hotness: 0 one-hot
VARIABLE = [0, 1, 0, 1]
MEAN = [0, 1, 0, 0]
EMB_DIM = 8
NUM_FEATURES = 13
BOTTOM = [16, 8]
TOP = [16, 8, 1]
DCN_LAYERS = 2
DCN_RANK = 4
BATCH = 64
NBATCH = 3
WARMUP, DECAY_START, DECAY_STEPS = 0, 1, 3
LR_SGD = 0.1
LR_ADAGRAD = 0.05
ADAGRAD_INIT = 0.1
ADAGRAD_EPS = 1e-7
RELU_MARGIN = 1e-5  # smallest |pre-activation| allowed: float32 errors are ~1e-7 here


def ceil8(x):
    return (x + 7) // 8 * 8


def lr_at(base, s):
    if s < WARMUP:
        return base * (1.0 - (WARMUP - s) / WARMUP)
    if s < DECAY_START:
        return base
    return base * ((DECAY_START + DECAY_STEPS - s) / DECAY_STEPS) ** 2


def truncated_normal(rng, sigma, shape):
    out = rng.normal(0.0, sigma, size=shape)
    bad = np.abs(out) > 2 * sigma
    while bad.any():
        out[bad] = rng.normal(0.0, sigma, size=int(bad.sum()))
        bad = np.abs(out) > 2 * sigma
    return out


def make_init(rng):
    init = {}
    w = (len(CARDS) + 1) * EMB_DIM

    def glorot(fan_in, fan_out):
        sigma = np.sqrt(2.0 / (fan_in + fan_out)) / 0.87962566103423978
        return truncated_normal(rng, sigma, (fan_in, fan_out)).astype(np.float32)

    fan_in = ceil8(NUM_FEATURES)
    for l, out in enumerate(BOTTOM):
        init[f"bottom_mlp_layer_{l}_kernel"] = glorot(fan_in, out)
        init[f"bottom_mlp_layer_{l}_bias"] = rng.normal(0.0, np.sqrt(1.0 / out), size=out).astype(np.float32)
        fan_in = out
    for l in range(DCN_LAYERS):
        init[f"cross_layer_{l}_v_kernel"] = glorot(w, DCN_RANK)
        init[f"cross_layer_{l}_u_kernel"] = glorot(DCN_RANK, w)
        init[f"cross_layer_{l}_bias"] = np.zeros(w, dtype=np.float32)
    fan_in = w
    for l, out in enumerate(TOP):
        init[f"top_mlp_layer_{l}_kernel"] = glorot(fan_in, out)
        init[f"top_mlp_layer_{l}_bias"] = rng.normal(0.0, np.sqrt(1.0 / out), size=out).astype(np.float32)
        fan_in = out
    for t, c in enumerate(CARDS):
        b = np.sqrt(1.0 / c)
        init[f"table_{t}"] = rng.uniform(-b, b, size=(c, EMB_DIM)).astype(np.float32)
    return init


def make_batches(rng):
    """Power-law ids behind a fixed per-table permutation; bags of a fixed size or
    of a length uniform on [0, HOT[t]] (a few empty bags in every batch)."""
    perms = [rng.permutation(c) for c in CARDS]
    probs = []
    for c in CARDS:
        p = 1.0 / np.arange(1, c + 1) ** 1.2
        probs.append(p / p.sum())
    batches = []
    for _ in range(NBATCH):
        raw = np.log(rng.exponential(20.0, size=(BATCH, NUM_FEATURES)) + 3.0)
        raw[rng.random(size=raw.shape) < 0.1] = 0.0
        num = raw.astype(np.float32)
        labels = (rng.random(BATCH) < 0.3).astype(np.float32)
        bags = []
        for t, c in enumerate(CARDS):
            if HOT[t] == 0:
                lens = np.ones(BATCH, dtype=np.int64)
            elif VARIABLE[t]:
                lens = rng.integers(0, HOT[t] + 1, size=BATCH)
                lens[:2] = (0, HOT[t])  # an empty bag and a full one, whatever the draw
            else:
                lens = np.full(BATCH, HOT[t], dtype=np.int64)
            ids = perms[t][rng.choice(c, size=int(lens.sum()), p=probs[t])].astype(np.int32)
            offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
            bags.append((ids, offsets))
        batches.append((num, labels, bags))
    return batches


class Dlrm(torch.nn.Module):
    def __init__(self, init):
        super().__init__()
        self.num_ld = ceil8(NUM_FEATURES)
        self.n = len(CARDS) + 1
        self.w = self.n * EMB_DIM
        self.order = sorted(range(len(CARDS)), key=lambda t: (-CARDS[t], t))

        def tensor(name, transpose=False):
            a = torch.from_numpy(init[name].astype(np.float64))
            return a.T.contiguous() if transpose else a

        def linear(prefix, fan_in, out, bias=True, bias_name=None):
            lin = torch.nn.Linear(fan_in, out, bias=bias).double()
            with torch.no_grad():
                lin.weight.copy_(tensor(prefix + "_kernel", True))
                if bias:
                    lin.bias.copy_(tensor(bias_name or prefix + "_bias"))
            return lin

        def mlp(kind, fan_in, widths):
            layers = []
            for l, out in enumerate(widths):
                layers.append(linear(f"{kind}_mlp_layer_{l}", fan_in, out))
                fan_in = out
            return torch.nn.ModuleList(layers)

        self.bottom = mlp("bottom", self.num_ld, BOTTOM)
        self.cross_v = torch.nn.ModuleList(
            [linear(f"cross_layer_{l}_v", self.w, DCN_RANK, bias=False) for l in range(DCN_LAYERS)])
        self.cross_u = torch.nn.ModuleList(
            [linear(f"cross_layer_{l}_u", DCN_RANK, self.w, bias_name=f"cross_layer_{l}_bias")
             for l in range(DCN_LAYERS)])
        self.top = mlp("top", self.w, TOP)
        tables = []
        for t, c in enumerate(CARDS):
            e = torch.nn.EmbeddingBag(c, EMB_DIM, mode="mean" if MEAN[t] else "sum", sparse=True).double()
            with torch.no_grad():
                e.weight.copy_(tensor(f"table_{t}"))
            tables.append(e)
        self.tables = torch.nn.ModuleList(tables)

    def named_tensors(self):
        out = []
        for l, lin in enumerate(self.bottom):
            out.append((f"bottom_mlp_layer_{l}_kernel", lin.weight, True))
            out.append((f"bottom_mlp_layer_{l}_bias", lin.bias, False))
        for l in range(DCN_LAYERS):
            out.append((f"cross_layer_{l}_v_kernel", self.cross_v[l].weight, True))
            out.append((f"cross_layer_{l}_u_kernel", self.cross_u[l].weight, True))
            out.append((f"cross_layer_{l}_bias", self.cross_u[l].bias, False))
        for l, lin in enumerate(self.top):
            out.append((f"top_mlp_layer_{l}_kernel", lin.weight, True))
            out.append((f"top_mlp_layer_{l}_bias", lin.bias, False))
        for t, e in enumerate(self.tables):
            out.append((f"table_{t}", e.weight, False))
        return out

    def pooled(self, t, bag):
        ids, offsets = bag
        return self.tables[t](torch.from_numpy(ids.astype(np.int64)), torch.from_numpy(offsets[:-1].astype(np.int64)))

    def forward(self, num, bags):
        B = num.shape[0]
        pre = []
        h = torch.cat([num, torch.zeros(B, self.num_ld - num.shape[1], dtype=num.dtype)], dim=1)
        for lin in self.bottom:
            z = lin(h)
            pre.append(z)
            h = F.relu(z)
        embs = [self.pooled(t, bags[t]) for t in self.order]
        X = torch.stack([h] + embs, dim=1)
        X.retain_grad()
        x0 = X.reshape(B, self.w)
        inter = x0
        for l in range(DCN_LAYERS):
            inter = x0 * self.cross_u[l](self.cross_v[l](inter)) + inter
        y = inter
        for l, lin in enumerate(self.top):
            z = lin(y)
            if l + 1 < len(self.top):
                pre.append(z)
                y = F.relu(z)
            else:
                y = z
        return y.squeeze(1), X, inter, pre


def check_bags_by_hand(model, batch):
    """nn.EmbeddingBag against the bag rule written out: sum (or mean) of the rows,
    empty bags zero."""
    for t in range(len(CARDS)):
        ids, offsets = batch[2][t]
        got = model.pooled(t, batch[2][t]).detach().numpy()
        W = model.tables[t].weight.detach().numpy()
        for i in range(BATCH):
            rows = ids[offsets[i]:offsets[i + 1]]
            want = W[rows].sum(axis=0) if len(rows) else np.zeros(EMB_DIM)
            if MEAN[t] and len(rows):
                want = want / len(rows)
            if np.abs(got[i] - want).max() > 1e-12:
                sys.exit(f"gen_golden_multihot: nn.EmbeddingBag and the bag rule disagree on table {t}, sample {i}")


def loss_of(logits, labels):
    return F.binary_cross_entropy_with_logits(logits, labels, reduction="mean")


def check_margin(pre, where):
    m = min(float(z.detach().abs().min()) for z in pre)
    if m < RELU_MARGIN:
        sys.exit(f"gen_golden_multihot: a ReLU pre-activation is {m:.3g} from zero ({where})\nhint: change SEED")
    return m


def dense_grad(p):
    g = p.grad
    return g.to_dense() if g.is_sparse else g


def to_torch(batch):
    num, labels, bags = batch
    return torch.from_numpy(num.astype(np.float64)), torch.from_numpy(labels.astype(np.float64)), bags


def touched(bags, t):
    return np.unique(bags[t][0])


def train(init, batches, kind, base):
    """Three steps; torch.optim for SGD and Adagrad (sparse rows for the tables),
    row-wise Adagrad written out. Returns (lrs, losses, model, accumulators)."""
    model = Dlrm(init)
    params = [p for _, p, _ in model.named_tensors()]
    opt = None
    if kind == "sgd":
        opt = torch.optim.SGD(params, lr=base, momentum=0.0)
    elif kind == "adagrad":
        opt = torch.optim.Adagrad(params, lr=base, initial_accumulator_value=ADAGRAD_INIT, eps=ADAGRAD_EPS)
    acc = {}
    for n, p, _ in model.named_tensors():
        acc[n] = np.full((p.shape[0],) if n.startswith("table_") else tuple(p.shape), ADAGRAD_INIT)
    lrs, losses = [], []
    for s in range(NBATCH):
        lr = lr_at(base, s)
        num, labels, bags = to_torch(batches[s])
        for _, p, _ in model.named_tensors():
            p.grad = None
        logits, _, _, pre = model(num, bags)
        check_margin(pre, f"{kind} step {s}")
        loss = loss_of(logits, labels)
        loss.backward()
        if opt is not None:
            for grp in opt.param_groups:
                grp["lr"] = lr
            opt.step()
        else:
            with torch.no_grad():
                for n, p, _ in model.named_tensors():
                    g = dense_grad(p).numpy()
                    wt = p.detach().numpy()
                    if n.startswith("table_"):
                        rows = touched(bags, int(n.split("_")[1]))
                        gr = g[rows]
                        acc[n][rows] += (gr ** 2).mean(axis=1)
                        wt[rows] -= lr * gr / (np.sqrt(acc[n][rows])[:, None] + ADAGRAD_EPS)
                    else:
                        acc[n] += g ** 2
                        wt -= lr * g / (np.sqrt(acc[n]) + ADAGRAD_EPS)
        lrs.append(lr)
        losses.append(float(loss))
    if kind == "adagrad":
        for n, p, _ in model.named_tensors():
            st = opt.state[p]["sum"]
            acc[n] = (st.to_dense() if st.is_sparse else st).numpy()
    return lrs, losses, model, acc


def manual_check(init, batches, kind, base, model):
    """SGD and Adagrad again with the rules written out in numpy (only touched
    table rows, duplicates summed): torch.optim must agree."""
    ref = Dlrm(init)
    acc = {n: np.full(p.shape, ADAGRAD_INIT) for n, p, _ in ref.named_tensors()}
    for s in range(NBATCH):
        lr = lr_at(base, s)
        num, labels, bags = to_torch(batches[s])
        for _, p, _ in ref.named_tensors():
            p.grad = None
        logits, _, _, _ = ref(num, bags)
        loss_of(logits, labels).backward()
        with torch.no_grad():
            for n, p, _ in ref.named_tensors():
                g = dense_grad(p).numpy()
                w = p.detach().numpy()
                rows = touched(bags, int(n.split("_")[1])) if n.startswith("table_") else slice(None)
                if kind == "sgd":
                    w[rows] -= lr * g[rows]
                else:
                    acc[n][rows] += g[rows] ** 2
                    w[rows] -= lr * g[rows] / (np.sqrt(acc[n][rows]) + ADAGRAD_EPS)
    got = dict((n, p) for n, p, _ in model.named_tensors())
    for n, p, _ in ref.named_tensors():
        d = float((p - got[n]).abs().max())
        if d > 1e-12:
            sys.exit(f"gen_golden_multihot: torch.optim {kind} and the written-out rule disagree on {n} by {d:.3g}")


class Writer:
    def __init__(self):
        self.recs = []

    def add(self, name, arr, dtype):
        np_t = {DT_F32: "<f4", DT_I32: "<i4", DT_F64: "<f8"}[dtype]
        a = np.ascontiguousarray(np.asarray(arr), dtype=np_t)
        if a.ndim == 0:
            a = a.reshape(1)
        nb = name.encode()
        head = struct.pack("<I", len(nb)) + nb + struct.pack("<II", dtype, a.ndim)
        head += b"".join(struct.pack("<Q", d) for d in a.shape)
        self.recs.append(head + a.tobytes())

    def f32(self, name, t):
        if isinstance(t, torch.Tensor):
            t = t.detach().numpy()
        self.add(name, np.asarray(t, dtype=np.float64).astype(np.float32), DT_F32)

    def bytes(self):
        return struct.pack("<IIII", MAGIC, VERSION, len(self.recs), 0) + b"".join(self.recs)


def export(model, fn):
    out = []
    for n, p, transpose in model.named_tensors():
        a = fn(p).detach().numpy()
        out.append((n, a.T if transpose else a))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "dlrm_multihot.gold"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    rng = np.random.default_rng(SEED)
    init = make_init(rng)
    batches = make_batches(rng)
    w = Writer()
    for name, v in (("cards", CARDS), ("hot", HOT), ("variable", VARIABLE), ("mean", MEAN), ("emb_dim", [EMB_DIM]),
                    ("num_features", [NUM_FEATURES]), ("batch", [BATCH]), ("bottom", BOTTOM), ("top", TOP),
                    ("cross_layers", [DCN_LAYERS]), ("cross_rank", [DCN_RANK]), ("warmup", [WARMUP]),
                    ("decay_start", [DECAY_START]), ("decay_steps", [DECAY_STEPS])):
        w.add("mh/cfg/" + name, v, DT_I32)
    for name, v in (("lr_base_sgd", LR_SGD), ("lr_base_adagrad", LR_ADAGRAD), ("adagrad_init", ADAGRAD_INIT),
                    ("adagrad_eps", ADAGRAD_EPS)):
        w.add("mh/cfg/" + name, [v], DT_F64)
    for k, (num, labels, bags) in enumerate(batches):
        w.add(f"mh/batch{k}/numerical", num, DT_F32)
        w.add(f"mh/batch{k}/labels", labels, DT_F32)
        for t, (ids, offsets) in enumerate(bags):
            w.add(f"mh/batch{k}/ids_{t}", ids, DT_I32)
            if HOT[t]:
                w.add(f"mh/batch{k}/offsets_{t}", offsets, DT_I32)
    model = Dlrm(init)
    check_bags_by_hand(model, batches[0])
    for n, a in export(model, lambda p: p):
        w.f32("mh/init/" + n, a)

    num, labels, bags = to_torch(batches[0])
    logits, X, inter, pre = model(num, bags)
    check_margin(pre, "forward of batch 0")
    loss = loss_of(logits, labels)
    loss.backward()
    w.f32("mh/fwd/interaction_input", X)
    w.f32("mh/fwd/interaction_output", inter)
    w.f32("mh/fwd/logits", logits)
    w.add("mh/fwd/loss", [float(loss)], DT_F64)
    for n, a in export(model, dense_grad):
        w.f32("mh/grad/" + n, a)
    w.f32("mh/grad/interaction_input", X.grad)

    report = []
    for kind, base in (("sgd", LR_SGD), ("adagrad", LR_ADAGRAD), ("rowwise_adagrad", LR_ADAGRAD)):
        lrs, losses, trained, acc = train(init, batches, kind, base)
        if kind != "rowwise_adagrad":
            manual_check(init, batches, kind, base, trained)
        w.add(f"mh/{kind}/lr", lrs, DT_F64)
        w.add(f"mh/{kind}/loss", losses, DT_F64)
        for n, a in export(trained, lambda p: p):
            w.f32(f"mh/{kind}/after3/{n}", a)
            moved = np.linalg.norm(a - init[n]) / max(np.linalg.norm(init[n]), 1e-30)
            report.append(f"{kind:16s} {n:28s} moved {moved:.2e}")
        if kind != "sgd":
            for n, p, transpose in trained.named_tensors():
                st = acc[n]
                w.f32(f"mh/{kind}/after3/accum_{n}", st.T if transpose and st.ndim == 2 else st)
        report.append(f"{kind:16s} lr {lrs} loss {losses}")

    data = w.bytes()
    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, args.out)
    for line in report:
        print(line)
    print(f"wrote {args.out}: {len(data)} bytes, {len(w.recs)} records")


if __name__ == "__main__":
    main()
