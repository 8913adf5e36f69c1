#!/usr/bin/python3
"""gen_golden.py: writes tests/golden/dlrm_small.gold, the PyTorch reference the C
trainer is checked against (tests/golden/test_golden.c). Run it with Debian's
python3 (python3-torch, python3-numpy):

    /usr/bin/python3 tests/golden/gen_golden.py [--out PATH]

The model is written here from the seed's spec (NVIDIA TF2 DLRM, see
/work/shared/reference/seed_dlrm_tf2.md sections 1.1-1.6 and 12), not from the C
code. It is computed in float64 from float32-representable inputs and initial
values; every tensor is stored as float32, the scalars (loss, lr) as float64.
The output is deterministic: running the script twice gives identical bytes.

Model (small config):
  numerical (B, 13) -> zero-pad to (B, 16) -> bottom MLP 16, 8 (Linear+ReLU on every layer)
  tables with cardinalities [30, 7, 50, 7] in config order, D = 8, one id per table
  interaction input X (B, n=5, D): row 0 = bottom output, rows 1..4 = tables sorted by
      cardinality descending, ties by config index ascending -> tables [2, 0, 1, 3]
  dot interaction: [X[:,0,:] (8) | X_i.X_j for i > j, index i*(i-1)/2 + j (10) | 6 zeros] = 24
  top MLP 16, 8, 1 (ReLU except the last, linear) -> logit; loss = mean BCE with logits
  SGD: p -= lr*g (embeddings: touched rows, duplicate ids summed)
  Adagrad (Keras): acc += g^2; p -= lr*g/(sqrt(acc)+eps), acc0 = 0.1, eps = 1e-7; for
      embeddings only the rows touched in the step (accumulator included)
  lr(s), s = 0, 1, 2 (seed lr_scheduler.py): warmup 0, decay_start 1, decay_steps 3
      -> base, base, base*(2/3)^2; step s trains on batch s.

Fixture format (little-endian):
  header: u32 magic 0x444C4F47 ('GOLD' as bytes 47 4F 4C 44), u32 version 1,
          u32 count, u32 reserved (0)
  `count` records: u32 name_len, name bytes (no NUL), u32 dtype (0 = f32, 1 = i32,
          2 = f64), u32 ndim, u64 dims[ndim], raw data (prod(dims) elements, row-major)
Records:
  cfg/cards (T) i32; cfg/emb_dim, cfg/num_features, cfg/batch, cfg/warmup,
  cfg/decay_start, cfg/decay_steps (1) i32; cfg/bottom, cfg/top (layers) i32;
  cfg/lr_base_sgd, cfg/lr_base_adagrad, cfg/adagrad_init, cfg/adagrad_eps (1) f64
  batch{k}/numerical (B, 13) f32, batch{k}/labels (B) f32, batch{k}/cat (T, B) i32, k = 0..2
  init/<p> for p in bottom_mlp_layer_{l}_kernel (in, out) [Keras layout], ..._bias (out),
      top_mlp_layer_{l}_kernel, ..._bias, table_{t} (rows, D) in config order
  fwd/interaction_input (B, n, D), fwd/interaction_output (B, 24), fwd/logits (B),
      fwd/loss (1) f64 -- initial weights, batch 0
  grad/<dense p> (same shapes as init), grad/table_{t} (rows, D) dense (untouched rows 0),
      grad/interaction_input (B, n, D) = dLoss/dX, row 0 including the bottom-output path
  sgd/lr, adagrad/lr (3) f64: per-step learning rates
  sgd/loss, adagrad/loss (3) f64: loss of each step's forward (before its update)
  sgd/after3/<p>, adagrad/after3/<p> for every dense p and table_{t}
  adagrad/after3/accum_<p> for every dense p and accum_table_{t}
  cfg/lr_base_rowwise_adagrad (1) f64; rowwise_adagrad/lr, /loss (3) f64;
  rowwise_adagrad/after3/<p>, /after3/accum_<p>: row-wise Adagrad (accum_table_{t}
      is (rows): one accumulator per row), computed from its definition

DCNv2 model (records under dcn/; the same tables, bottom MLP, batches and lr
schedule as above; written from the definition of DLRM v2 / TorchRec's
LowRankCrossNet, not from the C code):
  x0 = X (B, n, D) flattened to (B, w = n*D), the interaction order above
  DCN_LAYERS cross layers: x_{l+1} = x0 * U_l(V_l(x_l)) + x_l, V_l = Linear(w, r, no bias),
      U_l = Linear(r, w) with bias b_l, r = DCN_RANK
  top MLP 16, 8, 1 on x_L (width w, no padding)
  init: bottom kernels/biases and tables as the dot model's; V, U truncated-normal
      Glorot (as the dense kernels), b = 0 (the C rule); top MLP from its own draw
Records: dcn/cfg/cards, dcn/cfg/emb_dim, dcn/cfg/num_features, dcn/cfg/batch,
  dcn/cfg/bottom, dcn/cfg/top, dcn/cfg/cross_layers, dcn/cfg/cross_rank (i32);
  dcn/init/<p> with p also cross_layer_{l}_v_kernel (w, r), _u_kernel (r, w), _bias (w);
  dcn/fwd/interaction_input (B, n, D), dcn/fwd/interaction_output (B, w) = x_L,
  dcn/fwd/logits (B), dcn/fwd/loss (1) f64; dcn/grad/<p>, dcn/grad/interaction_input;
  dcn/sgd/loss, dcn/adagrad/loss (3) f64; dcn/{sgd,adagrad}/after3/<p>,
  dcn/adagrad/after3/accum_<p>
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

SEED = 20240611
CARDS = [30, 7, 50, 7]
EMB_DIM = 8
NUM_FEATURES = 13
BOTTOM = [16, 8]
TOP = [16, 8, 1]
BATCH = 64
NBATCH = 3
WARMUP, DECAY_START, DECAY_STEPS = 0, 1, 3
LR_SGD = 0.5
LR_ADAGRAD = 0.05
ADAGRAD_INIT = 0.1
ADAGRAD_EPS = 1e-7
RELU_MARGIN = 1e-5  # smallest |pre-activation| allowed: float32 errors here are ~1e-7, so none can flip a ReLU


def ceil8(x):
    return (x + 7) // 8 * 8


def lr_at(base, s):
    """seed lr_scheduler.py, unclamped, s from 0"""
    if s < WARMUP:
        return base * (1.0 - (WARMUP - s) / WARMUP)
    if s < DECAY_START:
        return base
    return base * ((DECAY_START + DECAY_STEPS - s) / DECAY_STEPS) ** 2


# ---- data and initial values (numpy, float32-representable) -------------------

def truncated_normal(rng, sigma, shape):
    out = rng.normal(0.0, sigma, size=shape)
    bad = np.abs(out) > 2 * sigma
    while bad.any():
        out[bad] = rng.normal(0.0, sigma, size=int(bad.sum()))
        bad = np.abs(out) > 2 * sigma
    return out


def make_init(rng):
    """Seed initialisers: Glorot truncated normal kernels (in, out), N(0, 1/units)
    biases, U(+-sqrt(1/rows)) tables."""
    init = {}
    widths = [("bottom", ceil8(NUM_FEATURES), BOTTOM)]
    n = len(CARDS) + 1
    widths.append(("top", ceil8(EMB_DIM + n * (n - 1) // 2), TOP))
    for kind, fan_in, dims in widths:
        for l, out in enumerate(dims):
            sigma = np.sqrt(2.0 / (fan_in + out)) / 0.87962566103423978
            init[f"{kind}_mlp_layer_{l}_kernel"] = truncated_normal(rng, sigma, (fan_in, out)).astype(np.float32)
            init[f"{kind}_mlp_layer_{l}_bias"] = rng.normal(0.0, np.sqrt(1.0 / out), size=out).astype(np.float32)
            fan_in = out
    for t, c in enumerate(CARDS):
        b = np.sqrt(1.0 / c)
        init[f"table_{t}"] = rng.uniform(-b, b, size=(c, EMB_DIM)).astype(np.float32)
    return init


def make_batches(rng):
    """Power-law ids (a few hot rows repeat many times in a batch), behind a fixed
    per-table permutation so the hot rows are not always row 0."""
    perms = [rng.permutation(c) for c in CARDS]
    probs = []
    for c in CARDS:
        p = 1.0 / np.arange(1, c + 1) ** 1.2
        probs.append(p / p.sum())
    batches = []
    for _ in range(NBATCH):
        raw = np.log(rng.exponential(20.0, size=(BATCH, NUM_FEATURES)) + 3.0)
        raw[rng.random(size=raw.shape) < 0.1] = 0.0  # missing -> 0
        num = raw.astype(np.float32)
        labels = (rng.random(BATCH) < 0.3).astype(np.float32)
        cat = np.stack([perms[t][rng.choice(c, size=BATCH, p=probs[t])] for t, c in enumerate(CARDS)])
        batches.append((num, labels, cat.astype(np.int32)))
    return batches


# ---- the model (PyTorch, float64) ------------------------------------------------

class Dlrm(torch.nn.Module):
    """The dot model, or with dcn=True the DCNv2 model: the same bottom MLP, tables
    and top MLP, with DCN_LAYERS low-rank cross layers instead of the dot
    interaction."""

    def __init__(self, init, dcn=False):
        super().__init__()
        self.dcn = dcn
        self.num_ld = ceil8(NUM_FEATURES)
        self.n = len(CARDS) + 1
        self.w = self.n * EMB_DIM
        self.top_in = self.w if dcn else ceil8(EMB_DIM + self.n * (self.n - 1) // 2)
        # interaction order: cardinality descending, ties by config index (stable)
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
        if dcn:
            self.cross_v = torch.nn.ModuleList(
                [linear(f"cross_layer_{l}_v", self.w, DCN_RANK, bias=False) for l in range(DCN_LAYERS)])
            self.cross_u = torch.nn.ModuleList(
                [linear(f"cross_layer_{l}_u", DCN_RANK, self.w, bias_name=f"cross_layer_{l}_bias")
                 for l in range(DCN_LAYERS)])
        self.top = mlp("top", self.top_in, TOP)
        tables = []
        for t, c in enumerate(CARDS):
            e = torch.nn.Embedding(c, EMB_DIM, sparse=True).double()
            with torch.no_grad():
                e.weight.copy_(tensor(f"table_{t}"))
            tables.append(e)
        self.tables = torch.nn.ModuleList(tables)

    def named_tensors(self):
        """(name, tensor, transposed) in the C model's naming and parameter order;
        kernels are transposed to (in, out)."""
        out = []
        for l, lin in enumerate(self.bottom):
            out.append((f"bottom_mlp_layer_{l}_kernel", lin.weight, True))
            out.append((f"bottom_mlp_layer_{l}_bias", lin.bias, False))
        for l in range(DCN_LAYERS if self.dcn else 0):
            out.append((f"cross_layer_{l}_v_kernel", self.cross_v[l].weight, True))
            out.append((f"cross_layer_{l}_u_kernel", self.cross_u[l].weight, True))
            out.append((f"cross_layer_{l}_bias", self.cross_u[l].bias, False))
        for l, lin in enumerate(self.top):
            out.append((f"top_mlp_layer_{l}_kernel", lin.weight, True))
            out.append((f"top_mlp_layer_{l}_bias", lin.bias, False))
        for t, e in enumerate(self.tables):
            out.append((f"table_{t}", e.weight, False))
        return out

    def forward(self, num, cat):
        """Returns logits (B), X (B, n, D), interaction output (B, top_in): the dot
        layout or x_L, and the ReLU pre-activations (for the margin check)."""
        B = num.shape[0]
        pre = []
        h = torch.cat([num, torch.zeros(B, self.num_ld - num.shape[1], dtype=num.dtype)], dim=1)
        for lin in self.bottom:
            z = lin(h)
            pre.append(z)
            h = F.relu(z)
        embs = [self.tables[t](cat[t]) for t in self.order]
        X = torch.stack([h] + embs, dim=1)
        X.retain_grad()
        if self.dcn:
            x0 = X.reshape(B, self.w)
            inter = x0
            for l in range(DCN_LAYERS):
                inter = x0 * self.cross_u[l](self.cross_v[l](inter)) + inter
        else:
            Z = torch.bmm(X, X.transpose(1, 2))
            li, lj = torch.tril_indices(self.n, self.n, offset=-1)  # row-major, i > j
            pairs = Z[:, li, lj]
            used = EMB_DIM + pairs.shape[1]
            inter = torch.cat([X[:, 0, :], pairs, torch.zeros(B, self.top_in - used, dtype=X.dtype)], dim=1)
        y = inter
        for l, lin in enumerate(self.top):
            z = lin(y)
            if l + 1 < len(self.top):
                pre.append(z)
                y = F.relu(z)
            else:
                y = z
        return y.squeeze(1), X, inter, pre


def to_torch(batch):
    num, labels, cat = batch
    return (torch.from_numpy(num.astype(np.float64)), torch.from_numpy(labels.astype(np.float64)),
            torch.from_numpy(cat.astype(np.int64)))


def loss_of(logits, labels):
    return F.binary_cross_entropy_with_logits(logits, labels, reduction="mean")



def forward_gradient_records(w, model, batch, prefix, what):
    """The forward at the initial weights on one batch and the gradients of every
    parameter and of X: records <prefix>fwd/... and <prefix>grad/..."""
    num, labels, cat = to_torch(batch)
    logits, X, inter, pre = model(num, cat)
    check_margin(pre, what)
    loss = loss_of(logits, labels)
    loss.backward()
    w.f32(prefix + "fwd/interaction_input", X)
    w.f32(prefix + "fwd/interaction_output", inter)
    w.f32(prefix + "fwd/logits", logits)
    w.add(prefix + "fwd/loss", [float(loss)], DT_F64)
    for n, a in export(model, dense_grad):
        w.f32(prefix + "grad/" + n, a)
    w.f32(prefix + "grad/interaction_input", X.grad)

def check_margin(pre, where):
    m = min(float(z.detach().abs().min()) for z in pre)
    if m < RELU_MARGIN:
        sys.exit(f"gen_golden: a ReLU pre-activation is {m:.3g} from zero ({where}); "
                 f"float32 could flip it\nhint: change SEED")
    return m


def dense_grad(p):
    g = p.grad
    return g.to_dense() if g.is_sparse else g


def train(init, batches, opt_kind, base, dcn=False):
    """Three steps with the seed's schedule (the DCNv2 model with dcn); returns
    (lrs, losses, model, optimizer, smallest |ReLU pre-activation| seen)."""
    model = Dlrm(init, dcn)
    params = [p for _, p, _ in model.named_tensors()]
    if opt_kind == "sgd":
        opt = torch.optim.SGD(params, lr=base, momentum=0.0)
    else:
        opt = torch.optim.Adagrad(params, lr=base, initial_accumulator_value=ADAGRAD_INIT, eps=ADAGRAD_EPS)
    lrs, losses, margin = [], [], float("inf")
    for s in range(NBATCH):
        lr = lr_at(base, s)
        for grp in opt.param_groups:
            grp["lr"] = lr
        num, labels, cat = to_torch(batches[s])
        opt.zero_grad(set_to_none=True)
        logits, _, _, pre = model(num, cat)
        margin = min(margin, check_margin(pre, f"{'dcn ' if dcn else ''}{opt_kind} step {s}"))
        loss = loss_of(logits, labels)
        loss.backward()
        opt.step()
        lrs.append(lr)
        losses.append(float(loss))
    return lrs, losses, model, opt, margin


def manual_check(init, batches, opt_kind, base, model, opt):
    """Re-does the three steps with the update rules written out in numpy (sparse
    embedding rows, duplicates summed) and checks torch.optim agrees."""
    ref = Dlrm(init)
    names = [n for n, _, _ in ref.named_tensors()]
    acc = {n: np.full(p.shape, ADAGRAD_INIT) for n, p, _ in ref.named_tensors()}
    for s in range(NBATCH):
        lr = lr_at(base, s)
        num, labels, cat = to_torch(batches[s])
        for _, p, _ in ref.named_tensors():
            p.grad = None
        logits, _, _, _ = ref(num, cat)
        loss_of(logits, labels).backward()
        with torch.no_grad():
            for n, p, _ in ref.named_tensors():
                g = dense_grad(p).numpy()
                w = p.detach().numpy()
                if n.startswith("table_"):
                    t = int(n.split("_")[1])
                    rows = np.unique(cat[t].numpy())
                else:
                    rows = slice(None)
                if opt_kind == "sgd":
                    w[rows] -= lr * g[rows]
                else:
                    acc[n][rows] += g[rows] ** 2
                    w[rows] -= lr * g[rows] / (np.sqrt(acc[n][rows]) + ADAGRAD_EPS)
    got = dict((n, p) for n, p, _ in model.named_tensors())
    for n, p, _ in ref.named_tensors():
        d = float((p - got[n]).abs().max())
        if d > 1e-12:
            sys.exit(f"gen_golden: torch.optim {opt_kind} and the written-out rule disagree on {n} by {d:.3g}")
        if opt_kind == "adagrad":
            st = opt.state[got[n]]["sum"]
            st = st.to_dense() if st.is_sparse else st
            d = float(np.abs(st.numpy() - acc[n]).max())
            if d > 1e-12:
                sys.exit(f"gen_golden: Adagrad accumulator of {n} disagrees by {d:.3g}")
    return names


# ---- DCNv2 (DLRM v2) ---------------------------------------------------------------

DCN_LAYERS = 2
DCN_RANK = 4
DCN_SEED = SEED + 2  # the cross layers' and top MLP's draw (the dot records stay as they were)


def dcn_make_init(rng, base_init):
    """Bottom MLP and tables of the dot model; cross V, U Glorot truncated normal
    (in, out), zero cross biases; a top MLP over w = n*D inputs."""
    init = {k: v for k, v in base_init.items() if k.startswith("bottom_") or k.startswith("table_")}
    w = (len(CARDS) + 1) * EMB_DIM

    def glorot(fan_in, fan_out):
        sigma = np.sqrt(2.0 / (fan_in + fan_out)) / 0.87962566103423978
        return truncated_normal(rng, sigma, (fan_in, fan_out)).astype(np.float32)

    for l in range(DCN_LAYERS):
        init[f"cross_layer_{l}_v_kernel"] = glorot(w, DCN_RANK)
        init[f"cross_layer_{l}_u_kernel"] = glorot(DCN_RANK, w)
        init[f"cross_layer_{l}_bias"] = np.zeros(w, dtype=np.float32)
    fan_in = w
    for l, out in enumerate(TOP):
        init[f"top_mlp_layer_{l}_kernel"] = glorot(fan_in, out)
        init[f"top_mlp_layer_{l}_bias"] = rng.normal(0.0, np.sqrt(1.0 / out), size=out).astype(np.float32)
        fan_in = out
    return init


def dcn_records(w, base_init, batches, report):
    """Adds the dcn/ records to writer w."""
    init = dcn_make_init(np.random.default_rng(DCN_SEED), base_init)
    w.add("dcn/cfg/cards", CARDS, DT_I32)
    w.add("dcn/cfg/emb_dim", [EMB_DIM], DT_I32)
    w.add("dcn/cfg/num_features", [NUM_FEATURES], DT_I32)
    w.add("dcn/cfg/batch", [BATCH], DT_I32)
    w.add("dcn/cfg/bottom", BOTTOM, DT_I32)
    w.add("dcn/cfg/top", TOP, DT_I32)
    w.add("dcn/cfg/cross_layers", [DCN_LAYERS], DT_I32)
    w.add("dcn/cfg/cross_rank", [DCN_RANK], DT_I32)
    model = Dlrm(init, dcn=True)
    for n, a in export(model, lambda p: p):
        w.f32("dcn/init/" + n, a)
    forward_gradient_records(w, model, batches[0], "dcn/", "dcn forward of batch 0")
    for kind, base in (("sgd", LR_SGD), ("adagrad", LR_ADAGRAD)):
        _, losses, trained, opt, margin = train(init, batches, kind, base, dcn=True)
        w.add(f"dcn/{kind}/loss", losses, DT_F64)
        for n, a in export(trained, lambda p: p):
            w.f32(f"dcn/{kind}/after3/{n}", a)
            ref = np.linalg.norm(init[n])
            moved = np.linalg.norm(a - init[n]) / (ref if ref > 0 else 1.0)
            report.append(f"dcn {kind:8s} {n:28s} moved {moved:.2e}")
        if kind == "adagrad":
            for n, p, transpose in trained.named_tensors():
                st = opt.state[p]["sum"]
                st = (st.to_dense() if st.is_sparse else st).numpy()
                w.f32(f"dcn/adagrad/after3/accum_{n}", st.T if transpose else st)
        report.append(f"dcn {kind:8s} loss {losses} min |relu pre-activation| {margin:.3g}")


# ---- fixture writer ----------------------------------------------------------------

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
    """(name, numpy float64) of every tensor of `model`, via fn(tensor)."""
    out = []
    for n, p, transpose in model.named_tensors():
        a = fn(p).detach().numpy()
        out.append((n, a.T if transpose else a))
    return out


def rowwise_adagrad_records(w, init, batches, report):
    """Row-wise Adagrad (FBGEMM/TorchRec EXACT_ROWWISE_ADAGRAD), written from its
    definition: three steps with the Adagrad schedule; each touched embedding row r
    (duplicates summed: the dense gradient of the lookup) gets acc[r] += mean over
    its D columns of g^2 and w[r] -= lr * g / (sqrt(acc[r]) + eps); the MLPs take
    element-wise Adagrad. Records rowwise_adagrad/{lr,loss} and after3/<p>,
    after3/accum_<p> (tables: one value per row)."""
    model = Dlrm(init)
    acc = {}
    for n, p, _ in model.named_tensors():
        shape = (p.shape[0],) if n.startswith("table_") else tuple(p.shape)
        acc[n] = np.full(shape, ADAGRAD_INIT)
    lrs, losses = [], []
    for s in range(NBATCH):
        lr = lr_at(LR_ADAGRAD, s)
        num, labels, cat = to_torch(batches[s])
        for _, p, _ in model.named_tensors():
            p.grad = None
        logits, _, _, pre = model(num, cat)
        check_margin(pre, f"rowwise_adagrad step {s}")
        loss = loss_of(logits, labels)
        loss.backward()
        with torch.no_grad():
            for n, p, _ in model.named_tensors():
                g = dense_grad(p).numpy().astype(np.float64)
                wt = p.detach().numpy()
                if n.startswith("table_"):
                    rows = np.unique(cat[int(n.split("_")[1])].numpy())
                    gr = g[rows]
                    acc[n][rows] += (gr ** 2).mean(axis=1)
                    wt[rows] -= lr * gr / (np.sqrt(acc[n][rows])[:, None] + ADAGRAD_EPS)
                else:
                    acc[n] += g ** 2
                    wt -= lr * g / (np.sqrt(acc[n]) + ADAGRAD_EPS)
        lrs.append(lr)
        losses.append(float(loss))
    w.add("cfg/lr_base_rowwise_adagrad", [LR_ADAGRAD], DT_F64)
    w.add("rowwise_adagrad/lr", lrs, DT_F64)
    w.add("rowwise_adagrad/loss", losses, DT_F64)
    for n, p, transpose in model.named_tensors():
        a = p.detach().numpy()
        a = a.T if transpose else a
        w.f32(f"rowwise_adagrad/after3/{n}", a)
        st = acc[n]
        w.f32(f"rowwise_adagrad/after3/accum_{n}", st.T if transpose and st.ndim == 2 else st)
        moved = np.linalg.norm(a - init[n]) / np.linalg.norm(init[n])
        report.append(f"rowwise  {n:28s} moved {moved:.2e}")
    report.append(f"rowwise  lr {lrs} loss {losses}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "dlrm_small.gold"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    rng = np.random.default_rng(SEED)
    init = make_init(rng)
    batches = make_batches(rng)
    w = Writer()
    w.add("cfg/cards", CARDS, DT_I32)
    w.add("cfg/emb_dim", [EMB_DIM], DT_I32)
    w.add("cfg/num_features", [NUM_FEATURES], DT_I32)
    w.add("cfg/batch", [BATCH], DT_I32)
    w.add("cfg/bottom", BOTTOM, DT_I32)
    w.add("cfg/top", TOP, DT_I32)
    w.add("cfg/warmup", [WARMUP], DT_I32)
    w.add("cfg/decay_start", [DECAY_START], DT_I32)
    w.add("cfg/decay_steps", [DECAY_STEPS], DT_I32)
    w.add("cfg/lr_base_sgd", [LR_SGD], DT_F64)
    w.add("cfg/lr_base_adagrad", [LR_ADAGRAD], DT_F64)
    w.add("cfg/adagrad_init", [ADAGRAD_INIT], DT_F64)
    w.add("cfg/adagrad_eps", [ADAGRAD_EPS], DT_F64)
    for k, (num, labels, cat) in enumerate(batches):
        w.add(f"batch{k}/numerical", num, DT_F32)
        w.add(f"batch{k}/labels", labels, DT_F32)
        w.add(f"batch{k}/cat", cat, DT_I32)
    model = Dlrm(init)
    for n, a in export(model, lambda p: p):
        w.f32("init/" + n, a)

    # forward and gradients at the initial weights, batch 0
    forward_gradient_records(w, model, batches[0], "", "forward of batch 0")

    report = []
    for kind, base in (("sgd", LR_SGD), ("adagrad", LR_ADAGRAD)):
        lrs, losses, trained, opt, margin = train(init, batches, kind, base)
        manual_check(init, batches, kind, base, trained, opt)
        w.add(f"{kind}/lr", lrs, DT_F64)
        w.add(f"{kind}/loss", losses, DT_F64)
        after = export(trained, lambda p: p)
        for n, a in after:
            w.f32(f"{kind}/after3/{n}", a)
            moved = np.linalg.norm(a - init[n]) / np.linalg.norm(init[n])
            report.append(f"{kind:8s} {n:28s} moved {moved:.2e}")
        if kind == "adagrad":
            for n, p, transpose in trained.named_tensors():
                st = opt.state[p]["sum"]
                st = (st.to_dense() if st.is_sparse else st).numpy()
                w.f32(f"adagrad/after3/accum_{n}", st.T if transpose else st)
        report.append(f"{kind:8s} lr {lrs} loss {losses} min |relu pre-activation| {margin:.3g}")

    rowwise_adagrad_records(w, init, batches, report)
    dcn_records(w, init, batches, report)

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
