#!/usr/bin/python3
"""torch_real_auc.py DATASET_DIR [options]: trains the same DLRM as terarec-worker on
a split-binary dataset (feature_spec.yaml + train/ + test/, e.g. the output of
`terarec data prepare`) with PyTorch, and prints the exact test AUC after each
epoch, plus the AUC of a frequency baseline (naive Bayes over the categorical ids:
each id's smoothed click rate on the training split, summed as log-odds).

The model follows the seed (NVIDIA TF2 DLRM) like terarec: numerical features
padded to a multiple of 8, bottom MLP with ReLU on every layer, embeddings
U(+-sqrt(1/rows)), dot interaction over [bottom, tables by cardinality
descending], [bottom | strict lower triangle | zero pad to 8], top MLP (ReLU but the
last), BCE with logits, plain SGD for all parameters with the seed's schedule
(linear warm-up from 0, constant, power-2 decay). Dense kernels: truncated-normal
Glorot; biases N(0, 1/units). Batches are taken in file order (the prepared train
split is already shuffled), the last partial batch dropped, as terarec does.

Run with Debian's python3 (python3-torch, python3-numpy, python3-yaml)."""
import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402


def load_split(root, spec, split):
    chunks = spec["source_spec"][split]
    fs = spec["feature_spec"]
    ch = spec["channel_spec"]
    out = {}
    for c in chunks:
        path = os.path.join(root, c["files"][0])
        feats = c["features"]
        if feats == ch["label"]:
            out["label"] = np.fromfile(path, dtype=np.uint8).astype(np.float32)
        elif feats == ch["numerical"]:
            out["num"] = np.fromfile(path, dtype=np.float16).reshape(-1, len(feats)).astype(np.float32)
        else:
            out[feats[0]] = np.fromfile(path, dtype=np.dtype(fs[feats[0]]["dtype"])).astype(np.int64)
    cats = np.stack([out[name] for name in ch["categorical"]], axis=1)
    return out["num"], cats, out["label"]


def exact_auc(scores, labels):
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order]
    # average ranks over ties (Mann-Whitney)
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2.0 + 1.0
        i = j + 1
    npos = y.sum()
    nneg = len(y) - npos
    return (ranks[y == 1].sum() - npos * (npos + 1) / 2.0) / (npos * nneg)


def glorot_trunc_(w, fan_in, fan_out, gen):
    sigma = np.sqrt(2.0 / (fan_in + fan_out)) / 0.87962566103423978
    with torch.no_grad():
        x = torch.randn(w.shape, generator=gen, dtype=torch.float64)
        bad = x.abs() > 2.0
        while bad.any():
            x[bad] = torch.randn(int(bad.sum()), generator=gen, dtype=torch.float64)
            bad = x.abs() > 2.0
        w.copy_((x * sigma).to(w.dtype))


class DLRM(torch.nn.Module):
    def __init__(self, cards, num_features, dim, bottom, top, gen):
        super().__init__()
        self.num_ld = (num_features + 7) // 8 * 8
        self.order = sorted(range(len(cards)), key=lambda t: (-cards[t], t))
        self.emb = torch.nn.ModuleList()
        for c in cards:
            e = torch.nn.Embedding(c, dim, sparse=True)
            b = np.sqrt(1.0 / c)
            with torch.no_grad():
                e.weight.copy_(torch.rand(c, dim, generator=gen) * 2 * b - b)
            self.emb.append(e)
        self.bottom = self._mlp([self.num_ld] + bottom, last_relu=True, gen=gen)
        n = len(cards) + 1
        self.top_in = (dim + n * (n - 1) // 2 + 7) // 8 * 8
        self.top = self._mlp([self.top_in] + top, last_relu=False, gen=gen)
        self.li, self.lj = torch.tril_indices(n, n, offset=-1)
        self.dim = dim

    @staticmethod
    def _mlp(widths, last_relu, gen):
        layers = []
        for i in range(len(widths) - 1):
            lin = torch.nn.Linear(widths[i], widths[i + 1])
            glorot_trunc_(lin.weight, widths[i], widths[i + 1], gen)
            with torch.no_grad():
                lin.bias.copy_(torch.randn(widths[i + 1], generator=gen) * np.sqrt(1.0 / widths[i + 1]))
            layers.append(lin)
            if i + 2 < len(widths) or last_relu:
                layers.append(torch.nn.ReLU())
        return torch.nn.Sequential(*layers)

    def forward(self, num, cat):
        x = torch.nn.functional.pad(num, (0, self.num_ld - num.shape[1]))
        b = self.bottom(x)
        vecs = [b] + [self.emb[t](cat[:, t]) for t in self.order]
        X = torch.stack(vecs, dim=1)
        Z = torch.bmm(X, X.transpose(1, 2))
        pairs = Z[:, self.li, self.lj]
        out = torch.cat([b, pairs], dim=1)
        out = torch.nn.functional.pad(out, (0, self.top_in - out.shape[1]))
        return self.top(out).squeeze(1)


def frequency_baseline(tr_cat, tr_y, te_cat, alpha=10.0):
    prior = tr_y.mean()
    logit_prior = np.log(prior / (1 - prior))
    score = np.zeros(len(te_cat))
    for t in range(tr_cat.shape[1]):
        ids = tr_cat[:, t]
        card = max(ids.max(), te_cat[:, t].max()) + 1
        clicks = np.bincount(ids, weights=tr_y, minlength=card)
        counts = np.bincount(ids, minlength=card)
        p = (clicks + alpha * prior) / (counts + alpha)
        score += (np.log(p / (1 - p)) - logit_prior)[te_cat[:, t]]
    return score


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--batch_size", type=int, default=512)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--embedding_dim", type=int, default=16)
    ap.add_argument("--bottom_mlp_dims", default="64,16")
    ap.add_argument("--top_mlp_dims", default="64,1")
    ap.add_argument("--learning_rate", type=float, default=1.0)
    ap.add_argument("--warmup_steps", type=int, default=50)
    ap.add_argument("--decay_start_step", type=int, default=100000)
    ap.add_argument("--decay_steps", type=int, default=24000)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    spec = yaml.safe_load(open(os.path.join(a.dataset, "feature_spec.yaml")))
    cards = [spec["feature_spec"][n]["cardinality"] for n in spec["channel_spec"]["categorical"]]
    tr_num, tr_cat, tr_y = load_split(a.dataset, spec, "train")
    te_num, te_cat, te_y = load_split(a.dataset, spec, "test")
    base = exact_auc(frequency_baseline(tr_cat, tr_y, te_cat), te_y)
    print("frequency baseline (naive Bayes over ids): test auc %.6f" % base)

    gen = torch.Generator().manual_seed(a.seed)
    model = DLRM(cards, tr_num.shape[1], a.embedding_dim, [int(x) for x in a.bottom_mlp_dims.split(",")],
                 [int(x) for x in a.top_mlp_dims.split(",")], gen)
    dense = [p for n, p in model.named_parameters() if not n.startswith("emb.")]
    sparse = [p for n, p in model.named_parameters() if n.startswith("emb.")]
    opt_d = torch.optim.SGD(dense, lr=a.learning_rate)
    opt_s = torch.optim.SGD(sparse, lr=a.learning_rate)
    B = a.batch_size
    nb = len(tr_y) // B
    Xn, Xc, Y = torch.from_numpy(tr_num), torch.from_numpy(tr_cat), torch.from_numpy(tr_y)
    Tn, Tc = torch.from_numpy(te_num), torch.from_numpy(te_cat)
    step = 0
    best = 0.0
    t0 = time.time()
    for ep in range(a.epochs):
        for k in range(nb):
            s = step
            if s < a.warmup_steps:
                lr = a.learning_rate * (1.0 - (a.warmup_steps - s) / a.warmup_steps)
            elif s < a.decay_start_step:
                lr = a.learning_rate
            else:
                lr = a.learning_rate * ((a.decay_start_step + a.decay_steps - s) / a.decay_steps) ** 2
            for o in (opt_d, opt_s):
                for g in o.param_groups:
                    g["lr"] = lr
            sl = slice(k * B, (k + 1) * B)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(Xn[sl], Xc[sl]), Y[sl])
            opt_d.zero_grad()
            opt_s.zero_grad()
            loss.backward()
            opt_d.step()
            opt_s.step()
            step += 1
        with torch.no_grad():
            scores = torch.cat([model(Tn[i:i + 8192], Tc[i:i + 8192]) for i in range(0, len(te_y), 8192)]).numpy()
        auc = exact_auc(scores.astype(np.float64), te_y)
        best = max(best, auc)
        print("pytorch epoch %d (step %d): test auc %.6f" % (ep + 1, step, auc))
    print("pytorch best test auc %.6f (%.1f s)" % (best, time.time() - t0))


if __name__ == "__main__":
    main()
