"""Train a 2-layer GraphSAGE (or GAT) model twice, with PyG's layers and with numbasparse.pyg's
(the same classes with the aggregation on numbasparse), from the same initial weights, and print
the test accuracy and median epoch time of each.

    python examples/pyg_layers.py                                   # the bundled graph, SAGE
    python examples/pyg_layers.py --graph ../shared/data/flickr.npz --model gat --device cuda
    python examples/pyg_layers.py --compile                          # torch.compile both models

The task (numbasparse.graphs.node_classification): classes from the graph's communities
(planted ones for the bundled graph, Louvain's on a graph file), noisy features, a seeded
10/20/70 split.  Needs torch_geometric.
"""
import argparse
import time

import numpy as np
import scipy.sparse as sp
import torch
import torch_geometric.nn as pyg_nn

import numbasparse.pyg as nsg
from numbasparse import graphs


class Model(torch.nn.Module):
    def __init__(self, layers, kind, d_in, d_hidden, d_out):
        super().__init__()
        if kind == "sage":
            self.conv1, self.conv2 = layers.SAGEConv(d_in, d_hidden), layers.SAGEConv(d_hidden, d_out)
        else:
            self.conv1 = layers.GATConv(d_in, d_hidden // 4, heads=4)
            self.conv2 = layers.GATConv(d_hidden, d_out, heads=1)

    def forward(self, x, edge_index):
        x = torch.nn.functional.dropout(x, 0.5, self.training)
        x = torch.relu(self.conv1(x, edge_index))
        x = torch.nn.functional.dropout(x, 0.5, self.training)
        return self.conv2(x, edge_index)


def task(path):
    """(edge_index, features, labels, train, val, test) of the bundled graph or a .npz file."""
    A = None if path is None else sp.load_npz(path)
    A, X, y, train_idx, val_idx, test_idx = graphs.node_classification(A=A)
    coo = sp.coo_matrix(A)
    return torch.as_tensor(np.vstack([coo.row, coo.col]), dtype=torch.int64), X, y, train_idx, val_idx, test_idx


def train(model, data, device, epochs, compile_model):
    """(test accuracy at the best validation epoch, median epoch seconds)."""
    edge_index, X, y, train_idx, val_idx, test_idx = data
    edge_index, X, y = edge_index.to(device), torch.as_tensor(X, device=device), torch.as_tensor(y, device=device)
    model = model.to(device)
    run = torch.compile(model) if compile_model else model
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    best_val, best_test, times = -1.0, 0.0, []
    for _ in range(epochs):
        start = time.perf_counter()
        model.train()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(run(X, edge_index)[train_idx], y[train_idx])
        loss.backward()
        optimizer.step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        model.eval()
        with torch.no_grad():
            pred = run(X, edge_index).argmax(1)
        val = (pred[val_idx] == y[val_idx]).float().mean().item()
        if val > best_val:
            best_val, best_test = val, (pred[test_idx] == y[test_idx]).float().mean().item()
    return best_test, float(np.median(times[5:] if len(times) > 10 else times))


def _difference(theirs, ours, data, device):
    """Relative norm difference of the two models' outputs on the same weights (eval mode)."""
    edge_index, X = data[0].to(device), torch.as_tensor(data[1], device=device)
    outputs = []
    for model in (theirs, ours):
        model.to(device).eval()
        with torch.no_grad():
            outputs.append(model(X, edge_index))
    return float(torch.linalg.norm(outputs[1] - outputs[0]) / torch.linalg.norm(outputs[0]))


def compare(path=None, kind="sage", device="cpu", epochs=100, compile_model=False, seed=0):
    """{"pyg": (accuracy, epoch seconds), "numbasparse": (...), "first output, relative difference": d}
    from the same initial weights."""
    data = task(path)
    d_in, d_out = data[1].shape[1], int(data[2].max()) + 1
    torch.manual_seed(seed)
    theirs = Model(pyg_nn, kind, d_in, 64, d_out)
    ours = Model(nsg, kind, d_in, 64, d_out)
    ours.load_state_dict(theirs.state_dict())
    results = {"first output, relative difference": _difference(theirs, ours, data, device)}
    for name, model in (("pyg", theirs), ("numbasparse", ours)):
        torch.manual_seed(seed)  # the same dropout masks
        results[name] = train(model, data, device, epochs, compile_model)
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graph", help="a scipy CSR .npz (default: the bundled graph)")
    p.add_argument("--model", choices=("sage", "gat"), default="sage")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--compile", action="store_true", help="torch.compile both models")
    args = p.parse_args()
    results = compare(args.graph, args.model, args.device, args.epochs, args.compile)
    print(f"{args.model}: outputs on the same weights differ by {results.pop('first output, relative difference'):.1e} "
          f"(relative norm)")
    for name, (acc, epoch) in results.items():
        print(f"{args.model} {name:<11} {args.device}{' compiled' if args.compile else ''}: test accuracy {acc:.3f}, "
              f"median epoch {epoch * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
