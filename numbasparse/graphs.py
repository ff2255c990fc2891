"""Graphs for demos, tests and benchmarks: seeded generators and a loader for ``*.npz`` files.

Every generator returns a symmetric ``scipy.sparse.csr_matrix`` of float32 ones with no
self-loops, sorted indices and no duplicates, and is deterministic for a given seed.
"""
from pathlib import Path

import numpy as np
import scipy.sparse as sp


def _undirected(src, dst, n_nodes):
    """Symmetric CSR of ones from directed edge lists: duplicates merged, self-loops dropped."""
    keep = src != dst
    src, dst = src[keep], dst[keep]
    rows = np.concatenate([src, dst])
    cols = np.concatenate([dst, src])
    A = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=(n_nodes, n_nodes))
    A.sum_duplicates()
    A.data[:] = 1.0
    return A


def community_graph(n_nodes=4096, avg_degree=10.0, n_communities=40, mixing=0.2,
                    degree_exponent=2.3, seed=0, *, return_communities=False):
    """A power-law graph with community structure (degree-corrected planted partition).

    Node weights follow a Pareto law with tail exponent ``degree_exponent`` (so degrees are
    power-law, as in real graphs); community sizes are also heavy-tailed.  Each edge picks
    its source by weight and, with probability ``1 - mixing``, a target of the same
    community by weight, otherwise any target by weight (Chung-Lu within and across
    communities).  With ``return_communities``, also each node's community (int64).
    """
    rng = np.random.default_rng(seed)
    weight = rng.pareto(degree_exponent - 1.0, n_nodes) + 1.0
    weight = np.minimum(weight, np.sqrt(n_nodes) * 4)  # cap hubs below n/4 neighbours
    sizes = rng.pareto(1.5, n_communities) + 1.0
    counts = np.maximum(1, np.round(sizes / sizes.sum() * n_nodes)).astype(np.int64)
    counts[np.argmax(counts)] += n_nodes - counts.sum()
    community = rng.permutation(np.repeat(np.arange(n_communities), counts))

    order = np.argsort(community, kind="stable")
    cum_weight = np.cumsum(weight[order])
    ends = np.cumsum(counts)
    starts = ends - counts

    n_edges = int(round(n_nodes * avg_degree / 2))
    src = rng.choice(n_nodes, n_edges, p=weight / weight.sum())
    dst = rng.choice(n_nodes, n_edges, p=weight / weight.sum())
    intra = rng.random(n_edges) >= mixing
    c = community[src[intra]]
    lo = np.where(starts[c] > 0, cum_weight[starts[c] - 1], 0.0)
    hi = cum_weight[ends[c] - 1]
    pos = np.searchsorted(cum_weight, lo + rng.random(c.size) * (hi - lo), side="right")
    dst[intra] = order[np.clip(pos, starts[c], ends[c] - 1)]
    A = _undirected(src, dst, n_nodes)
    return (A, community.astype(np.int64)) if return_communities else A


def node_classification(n_classes=8, feature_dim=32, signal=0.6, seed=0, A=None):
    """A node-classification task for the GNN examples, on the bundled graph or on ``A``.

    Labels: each node's community modulo ``n_classes`` (the bundled graph's planted communities,
    or Louvain's communities of ``A`` made symmetric); features: a random unit-scale centre per
    class times ``signal`` plus unit Gaussian noise (too noisy alone, so neighbours help); split:
    10% train, 20% validation, 70% test, all seeded.
    Returns (A, features float32 (n, feature_dim), labels int64, train, val, test index arrays).
    """
    if A is None:
        A, community = community_graph(return_communities=True)
    else:
        from .reorder import louvain

        A = sp.csr_matrix(A)
        if A.shape[0] != A.shape[1]:
            raise ValueError(f"A must be square (a graph), got {A.shape}")
        pattern = sp.csr_matrix((np.ones(A.nnz), A.indices, A.indptr), shape=A.shape)
        community = louvain(pattern + pattern.T, seed=seed)
    rng = np.random.default_rng(seed)
    labels = (community % n_classes).astype(np.int64)
    centres = rng.standard_normal((n_classes, feature_dim))
    features = (signal * centres[labels] + rng.standard_normal((len(labels), feature_dim))).astype(np.float32)
    order = rng.permutation(len(labels))
    n_train, n_val = len(labels) // 10, len(labels) // 5
    return A, features, labels, order[:n_train], order[n_train:n_train + n_val], order[n_train + n_val:]


def default_graph():
    """The bundled default graph: ``community_graph()`` with its default seed (4096 nodes)."""
    return community_graph()


def rmat(scale, edge_factor=16, *, a=0.57, b=0.19, c=0.19, seed=0):
    """Graph500 R-MAT/Kronecker graph: 2**scale nodes, edge_factor * 2**scale edges drawn,
    then symmetrised; vertex labels are randomly permuted as Graph500 prescribes."""
    rng = np.random.default_rng(seed)
    n_nodes = 1 << scale
    n_edges = edge_factor * n_nodes
    index = np.int32 if scale < 31 else np.int64
    src = np.zeros(n_edges, index)
    dst = np.zeros(n_edges, index)
    ab, c_norm, a_norm = a + b, c / (1.0 - (a + b)), a / (a + b)
    for level in range(scale):
        bit = index(1 << level)
        down = rng.random(n_edges) > ab
        right = rng.random(n_edges) > np.where(down, c_norm, a_norm)
        src += bit * down
        dst += bit * right
    perm = rng.permutation(n_nodes).astype(index)
    return _undirected(perm[src], perm[dst], n_nodes)


def powerlaw(n_nodes, avg_degree=16.0, exponent=2.1, seed=0):
    """Chung-Lu power-law graph (no communities), for scaling curves."""
    return community_graph(n_nodes, avg_degree, n_communities=1, mixing=1.0,
                           degree_exponent=exponent, seed=seed)


def sample_subgraphs(A, count, min_nodes=1000, max_nodes=10000, seed=0):
    """GraphSAINT-style node sampling: ``count`` induced subgraphs of A, each on a node set
    of a size drawn uniformly from [min_nodes, max_nodes], nodes drawn without replacement
    with probability proportional to degree (||A[:, v]||^2 for a 0/1 graph)."""
    rng = np.random.default_rng(seed)
    degree = np.diff(sp.csc_matrix(A).indptr).astype(np.float64)
    p = (degree + 1e-12) / (degree + 1e-12).sum()
    subgraphs = []
    for _ in range(count):
        size = int(rng.integers(min_nodes, max_nodes + 1))
        size = min(size, int(np.count_nonzero(degree)) or A.shape[0])
        nodes = np.sort(rng.choice(A.shape[0], size, replace=False, p=p))
        subgraphs.append(sp.csr_matrix(A[nodes][:, nodes]))
    return subgraphs


def load_npz_dir(directory):
    """{name: CSR} for every ``*.npz`` (scipy sparse) file in ``directory``, sorted by name."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ValueError(f"data directory {str(directory)!r} does not exist")
    return {path.stem: sp.csr_matrix(sp.load_npz(path)) for path in sorted(directory.glob("*.npz"))}


def shuffled(A, seed=0):
    """``A`` with its node ids in a random order (a seeded permutation of rows and columns): how a
    graph file with hashed or crawl-order ids looks.  ``A``: square."""
    from .reorder import permute

    return permute(A, np.random.default_rng(seed).permutation(A.shape[0]))


def from_spec(spec):
    """A graph from a command-line spec: ``default``, ``rmat:SCALE[:EDGEFACTOR]``,
    ``powerlaw:NODES[:DEGREE]``, a path to a ``.npz`` file, or ``shuffle:`` before any of those
    (its node ids randomly permuted)."""
    if spec.startswith("shuffle:"):  # shuffle:SPEC: that graph with its node ids permuted (seed 0)
        return shuffled(from_spec(spec[len("shuffle:"):]))
    kind, _, rest = spec.partition(":")
    args = [a for a in rest.split(":") if a]
    try:
        if kind == "default" and not args:
            return default_graph()
        if kind == "rmat" and 1 <= len(args) <= 2:
            return rmat(int(args[0]), *(int(x) for x in args[1:]))
        if kind == "powerlaw" and 1 <= len(args) <= 2:
            return powerlaw(int(args[0]), *(float(x) for x in args[1:]))
    except ValueError:
        pass
    else:
        if spec.endswith(".npz") and Path(spec).is_file():
            return sp.csr_matrix(sp.load_npz(spec))
    raise ValueError(f"graph spec must be default, rmat:SCALE[:EF], powerlaw:N[:DEG] or a .npz path (any of them "
                     f"after shuffle:), got {spec!r}")
