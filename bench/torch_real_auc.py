#!/usr/bin/python3
"""torch_real_auc.py --train_dataset V --valid_dataset V --test_dataset T --model M [options]:
the PyTorch side of bench/real_auc.sh. Trains one model on the train split of a
split-binary dataset (feature_spec.yaml + train/ + test/, the output of `terarec data
prepare`), evaluates the exact AUC (ties averaged) on a validation split and a test
split after every epoch, chooses the epoch with the best VALIDATION AUC and reports
the test AUC at that epoch. The "test" split of --valid_dataset is the validation
rows; the "test" split of --test_dataset is the test rows (real_auc.sh prepares the
two with byte-identical train files).

Models, written as people usually write them in PyTorch (not a copy of terarec):
  dlrm     facebookresearch/dlrm layout: nn.EmbeddingBag(rows, D, mode="sum",
           sparse=True) per table, one id per bag; bottom MLP of nn.Linear with ReLU
           after every layer; dot interaction: bottom output concatenated with the
           strict lower triangle of the pairwise dots of [bottom, emb_0..emb_25];
           top MLP with ReLU after every layer but the last.
  dcnv2    the same embeddings and bottom MLP; a low-rank cross net over
           x0 = concat(bottom output, emb_0..emb_25):
           x_{l+1} = x0 * (U_l(V_l x_l) + b_l) + x_l (TorchRec LowRankCrossNet),
           then the top MLP on x_L.
  logreg   logistic regression: nn.Linear(13, 1) over the numerical inputs plus one
           learned weight per categorical id (nn.EmbeddingBag(rows, 1), sum).
Initialisation (--init): "dlrm" (the default) is facebookresearch/dlrm's
(dlrm_s_pytorch.py): embedding rows U(-sqrt(1/rows), +sqrt(1/rows)), MLP kernels
N(0, sqrt(2/(fan_in + fan_out))), biases N(0, sqrt(1/fan_out)); the cross layers as
TorchRec's LowRankCrossNet (Xavier-normal kernels, zero biases). "torch" keeps
PyTorch's module defaults (nn.Linear Kaiming-uniform, nn.EmbeddingBag N(0, 1)), which
no DLRM reference uses for embeddings. logreg's id weights start at 0 either way, as
logistic regression usually does. Loss: BCEWithLogits. Optimizer: one
torch.optim.Adagrad over all parameters with PyTorch's defaults apart from lr
(initial_accumulator_value 0, eps 1e-10; sparse embedding gradients). Every epoch
visits the training rows in a fresh permutation drawn from a torch.Generator seeded
with --seed (initialisation uses torch.manual_seed(--seed)); the last partial batch
is trained (DataLoader's default, and terarec's).
The last line is machine-readable:
  result model=M seed=S epoch=E valid_auc=X test_auc=Y epochs=N seconds=T
Run with Debian's python3 (python3-torch, python3-numpy, python3-yaml)."""
import argparse
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402


def load_spec(root):
    with open(os.path.join(root, "feature_spec.yaml")) as f:
        return yaml.safe_load(f)


def load_split(root, spec, split):
    """(numerical float32 [N, 13], categorical int64 [N, 26], label float32 [N])"""
    fs = spec["feature_spec"]
    ch = spec["channel_spec"]
    out = {}
    for c in spec["source_spec"][split]:
        path = os.path.join(root, c["files"][0])
        feats = c["features"]
        if feats == ch["label"]:
            out["label"] = np.fromfile(path, dtype=np.uint8).astype(np.float32)
        elif feats == ch["numerical"]:
            out["num"] = np.fromfile(path, dtype=np.float16).reshape(-1, len(feats)).astype(np.float32)
        else:
            out[feats[0]] = np.fromfile(path, dtype=np.dtype(fs[feats[0]]["dtype"])).astype(np.int64)
    cats = np.stack([out[name] for name in ch["categorical"]], axis=1)
    return torch.from_numpy(out["num"]), torch.from_numpy(cats), torch.from_numpy(out["label"])


def exact_auc(scores, labels):
    """Mann-Whitney AUC with average ranks over tied scores."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64)
    _, inv, counts = np.unique(scores, return_inverse=True, return_counts=True)
    last = np.cumsum(counts)  # 1-based rank of each distinct score's last element
    avg = last - (counts - 1) / 2.0
    ranks = avg[inv]
    npos = labels.sum()
    nneg = len(labels) - npos
    return float((ranks[labels == 1].sum() - npos * (npos + 1) / 2.0) / (npos * nneg))


def mlp(widths, relu_last):
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths) or relu_last:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DLRM(torch.nn.Module):
    def __init__(self, cards, num_features, dim, bottom, top, interaction, dcn_layers, dcn_rank):
        super().__init__()
        if bottom[-1] != dim:
            raise SystemExit("the last bottom MLP width must equal --embedding_dim")
        self.emb = torch.nn.ModuleList([torch.nn.EmbeddingBag(c, dim, mode="sum", sparse=True) for c in cards])
        self.bottom = mlp([num_features] + bottom, relu_last=True)
        self.interaction = interaction
        n = len(cards) + 1
        if interaction == "dot":
            li, lj = torch.tril_indices(n, n, offset=-1)
            self.register_buffer("li", li)
            self.register_buffer("lj", lj)
            top_in = dim + n * (n - 1) // 2
        else:
            width = n * dim
            self.V = torch.nn.ModuleList([torch.nn.Linear(width, dcn_rank, bias=False) for _ in range(dcn_layers)])
            self.U = torch.nn.ModuleList([torch.nn.Linear(dcn_rank, width, bias=True) for _ in range(dcn_layers)])
            top_in = width
        self.top = mlp([top_in] + top, relu_last=False)

    def init_dlrm(self):
        """facebookresearch/dlrm's initialisation (TorchRec's for the cross layers)."""
        with torch.no_grad():
            for e in self.emb:
                bound = (1.0 / e.weight.shape[0]) ** 0.5
                e.weight.uniform_(-bound, bound)
            for seq in (self.bottom, self.top):
                for lin in seq:
                    if isinstance(lin, torch.nn.Linear):
                        fo, fi = lin.weight.shape
                        lin.weight.normal_(0.0, (2.0 / (fi + fo)) ** 0.5)
                        lin.bias.normal_(0.0, (1.0 / fo) ** 0.5)
            if self.interaction != "dot":
                for V, U in zip(self.V, self.U):
                    torch.nn.init.xavier_normal_(V.weight)
                    torch.nn.init.xavier_normal_(U.weight)
                    U.bias.zero_()

    def forward(self, num, cat):
        x = self.bottom(num)
        ly = [e(cat[:, t:t + 1]) for t, e in enumerate(self.emb)]
        T = torch.cat([x] + ly, dim=1)
        if self.interaction == "dot":
            T = T.view(num.shape[0], -1, x.shape[1])
            Z = torch.bmm(T, T.transpose(1, 2))
            R = torch.cat([x, Z[:, self.li, self.lj]], dim=1)
        else:
            x0 = xl = T
            for V, U in zip(self.V, self.U):
                xl = x0 * U(V(xl)) + xl
            R = xl
        return self.top(R).squeeze(1)


class LogReg(torch.nn.Module):
    def __init__(self, cards, num_features):
        super().__init__()
        self.lin = torch.nn.Linear(num_features, 1)
        self.w = torch.nn.ModuleList([torch.nn.EmbeddingBag(c, 1, mode="sum", sparse=True) for c in cards])
        with torch.no_grad():
            for e in self.w:
                e.weight.zero_()

    def forward(self, num, cat):
        out = self.lin(num).squeeze(1)
        for t, e in enumerate(self.w):
            out = out + e(cat[:, t:t + 1]).squeeze(1)
        return out


def evaluate(model, num, cat, y, bs=8192):
    model.eval()
    with torch.no_grad():
        s = torch.cat([model(num[i:i + bs], cat[i:i + bs]) for i in range(0, len(y), bs)])
    model.train()
    return exact_auc(s.numpy(), y.numpy())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train_dataset", required=True, help="dataset whose train/ split is trained on")
    ap.add_argument("--valid_dataset", required=True, help="dataset whose test/ split is the validation split")
    ap.add_argument("--test_dataset", required=True, help="dataset whose test/ split is the test split")
    ap.add_argument("--model", choices=["dlrm", "dcnv2", "logreg"], default="dlrm")
    ap.add_argument("--batch_size", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--embedding_dim", type=int, default=16)
    ap.add_argument("--bottom_mlp_dims", default="64,16")
    ap.add_argument("--top_mlp_dims", default="64,1")
    ap.add_argument("--dcn_num_layers", type=int, default=2)
    ap.add_argument("--dcn_low_rank_dim", type=int, default=64)
    ap.add_argument("--learning_rate", type=float, default=0.015)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--init", choices=["dlrm", "torch"], default="dlrm",
                    help="initialisation: facebookresearch/dlrm's, or PyTorch's module defaults")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    spec = load_spec(a.train_dataset)
    cards = [spec["feature_spec"][n]["cardinality"] for n in spec["channel_spec"]["categorical"]]
    tr_num, tr_cat, tr_y = load_split(a.train_dataset, spec, "train")
    va_num, va_cat, va_y = load_split(a.valid_dataset, load_spec(a.valid_dataset), "test")
    te_num, te_cat, te_y = load_split(a.test_dataset, load_spec(a.test_dataset), "test")
    for name, c in (("validation", va_cat), ("test", te_cat)):
        if c.shape[1] != len(cards) or (c.max(dim=0).values >= torch.tensor(cards)).any():
            raise SystemExit("%s split ids do not fit the train dataset's cardinalities" % name)

    torch.manual_seed(a.seed)
    if a.model == "logreg":
        model = LogReg(cards, tr_num.shape[1])
    else:
        model = DLRM(cards, tr_num.shape[1], a.embedding_dim, [int(x) for x in a.bottom_mlp_dims.split(",")],
                     [int(x) for x in a.top_mlp_dims.split(",")], "dot" if a.model == "dlrm" else "dcnv2",
                     a.dcn_num_layers, a.dcn_low_rank_dim)
        if a.init == "dlrm":
            model.init_dlrm()
    opt = torch.optim.Adagrad(model.parameters(), lr=a.learning_rate)
    order_gen = torch.Generator().manual_seed(a.seed)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    B = a.batch_size
    nb = (len(tr_y) + B - 1) // B  # the last partial batch is trained
    t0 = time.time()
    best = (-1.0, 0, 0.0)  # (valid auc, epoch, test auc); the first epoch wins ties
    for ep in range(1, a.epochs + 1):
        perm = torch.randperm(len(tr_y), generator=order_gen)
        total = 0.0
        for k in range(nb):
            idx = perm[k * B:(k + 1) * B]
            loss = loss_fn(model(tr_num[idx], tr_cat[idx]), tr_y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        va = evaluate(model, va_num, va_cat, va_y)
        te = evaluate(model, te_num, te_cat, te_y)
        print("%s seed %d epoch %d: train loss %.6f, valid auc %.6f, test auc %.6f (%.1f s)" %
              (a.model, a.seed, ep, total / nb, va, te, time.time() - t0), flush=True)
        if va > best[0]:
            best = (va, ep, te)
    print("result model=%s seed=%d epoch=%d valid_auc=%.6f test_auc=%.6f epochs=%d seconds=%.1f" %
          (a.model, a.seed, best[1], best[0], best[2], a.epochs, time.time() - t0))


if __name__ == "__main__":
    main()
