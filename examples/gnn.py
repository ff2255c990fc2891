"""Train a 2-layer GCN or a graph-attention network on the bundled graph, with numbasparse's
autograd ops or with plain PyTorch sparse ops, and compare accuracy and epoch time.

    python examples/gnn.py --model gcn --ops numbasparse --device cuda
    python examples/gnn.py --model gat --ops torch --device cpu
    python examples/gnn.py --model gat --ops numbasparse --amp   # float32, then bfloat16 autocast

The task (numbasparse.graphs.node_classification): 4096 nodes, 8 classes from the planted
communities, noisy features.  Both variants start from the same seeded weights, so their
accuracies should agree up to floating-point summation order.  With ``--amp`` each variant
also trains under ``torch.autocast`` in bfloat16: numbasparse's ops then run in bfloat16 (as
cuBLAS matmuls do); the PyTorch variant's sparse ops, which autocast does not cover, in float32.
"""
import argparse
import time

import numpy as np
import scipy.sparse as sp
import torch

import numbasparse.torch as nst
from numbasparse import graphs


def normalized_adjacency(A):
    """GCN's D^-1/2 (A + I) D^-1/2."""
    A = sp.csr_matrix(A, dtype=np.float64) + sp.identity(A.shape[0], format="csr")
    d = 1.0 / np.sqrt(np.asarray(A.sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(d) @ A @ sp.diags(d))


class Aggregate:
    """``A_hat @ H`` and ``softmax_row(A ⊙ Q K^T) V`` by numbasparse or by plain PyTorch."""

    def __init__(self, A, ops, device):
        self.ops = ops
        if ops == "numbasparse":
            self.graph = nst.Graph(A, device=device)
        else:
            coo = A.tocoo()
            index = torch.as_tensor(np.vstack([coo.row, coo.col]), dtype=torch.int64, device=device)
            self.sparse = torch.sparse_coo_tensor(index, torch.as_tensor(coo.data, dtype=torch.float32),
                                                  A.shape, device=device, check_invariants=False).coalesce()
            self.row, self.col = index
            self.values = self.sparse.values()
            self.n = A.shape[0]

    def spmm(self, H):
        if self.ops == "numbasparse":
            return nst.spmm(self.graph, H)
        with torch.autocast(H.device.type, enabled=False):  # torch's sparse CUDA mm takes no bfloat16
            return torch.sparse.mm(self.sparse, H.float())

    def attention(self, Q, K, V):
        if self.ops == "numbasparse":
            return nst.graph_attention(self.graph, Q, K, V)
        Q, K, V = Q.float(), K.float(), V.float()
        scores = (Q[self.row] * K[self.col]).sum(-1) * self.values
        largest = torch.full((self.n,), -torch.inf, device=Q.device).scatter_reduce(0, self.row, scores, "amax")
        e = torch.exp(scores - largest[self.row])
        w = e / torch.zeros(self.n, device=Q.device).index_add(0, self.row, e)[self.row]
        return torch.zeros(self.n, V.shape[1], device=V.device).index_add(0, self.row, V[self.col] * w[:, None])


class GCN(torch.nn.Module):
    def __init__(self, aggregate, d_in, d_hidden, d_out):
        super().__init__()
        self.aggregate = aggregate
        self.l1, self.l2 = torch.nn.Linear(d_in, d_hidden), torch.nn.Linear(d_hidden, d_out)

    def forward(self, X):
        H = torch.relu(self.aggregate.spmm(self.l1(torch.nn.functional.dropout(X, 0.5, self.training))))
        return self.aggregate.spmm(self.l2(torch.nn.functional.dropout(H, 0.5, self.training)))


class GAT(torch.nn.Module):
    """Two graph-attention layers (scaled dot-product scores over the edges), one head each."""

    def __init__(self, aggregate, d_in, d_hidden, d_out):
        super().__init__()
        self.aggregate = aggregate
        self.qkv1 = torch.nn.Linear(d_in, 3 * d_hidden)
        self.qkv2 = torch.nn.Linear(d_hidden, 2 * d_hidden + d_out)
        self.d_hidden = d_hidden

    def layer(self, qkv, H):
        Q, K, V = qkv(H).split([self.d_hidden, self.d_hidden, qkv.out_features - 2 * self.d_hidden], dim=1)
        return self.aggregate.attention(Q.contiguous() / self.d_hidden ** 0.5, K.contiguous(), V.contiguous())

    def forward(self, X):
        H = torch.nn.functional.elu(self.layer(self.qkv1, torch.nn.functional.dropout(X, 0.5, self.training)))
        return self.layer(self.qkv2, torch.nn.functional.dropout(H, 0.5, self.training))


def train(model_name="gcn", ops="numbasparse", device="cpu", epochs=200, seed=0, amp=False):
    """(test accuracy at the best validation epoch, median epoch seconds); ``amp``: forward
    passes under bfloat16 autocast."""
    A, X, y, train_idx, val_idx, test_idx = graphs.node_classification()
    adjacency = normalized_adjacency(A) if model_name == "gcn" else sp.csr_matrix(A + sp.identity(A.shape[0]))
    torch.manual_seed(seed)
    aggregate = Aggregate(adjacency, ops, device)
    Model = {"gcn": GCN, "gat": GAT}[model_name]
    model = Model(aggregate, X.shape[1], 64, int(y.max()) + 1).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    X, y = torch.as_tensor(X, device=device), torch.as_tensor(y, device=device)
    best_val, best_test, times = -1.0, 0.0, []
    for _ in range(epochs):
        start = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            logits = model(X)
        loss = torch.nn.functional.cross_entropy(logits[train_idx].float(), y[train_idx])
        loss.backward()
        optimizer.step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        model.eval()
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            pred = model(X).argmax(1)
        val = (pred[val_idx] == y[val_idx]).float().mean().item()
        if val > best_val:
            best_val, best_test = val, (pred[test_idx] == y[test_idx]).float().mean().item()
    return best_test, float(np.median(times[5:] if len(times) > 10 else times))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("gcn", "gat"), default="gcn")
    p.add_argument("--ops", choices=("numbasparse", "torch", "both"), default="both")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--amp", action="store_true", help="also train under bfloat16 autocast")
    args = p.parse_args()
    for ops in ("numbasparse", "torch") if args.ops == "both" else (args.ops,):
        for amp in (False, True) if args.amp else (False,):
            acc, epoch = train(args.model, ops, args.device, args.epochs, amp=amp)
            precision = "bf16 autocast" if amp else "float32"
            print(f"{args.model} {ops:<11} {args.device} {precision:<13}: test accuracy {acc:.3f}, "
                  f"median epoch {epoch * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
