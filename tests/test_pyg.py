"""numbasparse.pyg: the same layers as PyG's (parameters, outputs, gradients), aggregation on
numbasparse.  Skipped without torch_geometric."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pyg_nn = pytest.importorskip("torch_geometric.nn")
nsg = pytest.importorskip("numbasparse.pyg")

LAYERS = [
    ("GCNConv", dict(in_channels=6, out_channels=5)),
    ("GCNConv", dict(in_channels=6, out_channels=5, improved=True, add_self_loops=False, bias=False)),
    ("SAGEConv", dict(in_channels=6, out_channels=5, aggr="mean")),
    ("SAGEConv", dict(in_channels=6, out_channels=5, aggr="max", normalize=True)),
    ("SAGEConv", dict(in_channels=6, out_channels=5, aggr="sum", root_weight=False, project=True)),
    ("GATConv", dict(in_channels=6, out_channels=4, heads=3)),
    ("GATConv", dict(in_channels=6, out_channels=4, heads=2, concat=False, add_self_loops=False)),
    ("GINConv", dict(eps=0.25, train_eps=True)),
]


def graph(seed, n=12, edges=40):
    """A random directed graph with duplicate edges and nodes that receive nothing."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, edges)
    dst = rng.integers(0, n - 3, edges)  # the last three nodes receive no message
    edge_index = torch.as_tensor(np.stack([src, dst]))
    edge_index = torch.cat([edge_index, edge_index[:, :5]], dim=1)  # duplicates
    x = torch.tensor(rng.standard_normal((n, 6)), requires_grad=True)
    return x, edge_index


def twins(name, kwargs):
    if name == "GINConv":
        torch.manual_seed(0)
        theirs = pyg_nn.GINConv(torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU()), **kwargs)
        ours = nsg.GINConv(torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU()), **kwargs)
    else:
        torch.manual_seed(0)
        theirs = getattr(pyg_nn, name)(**kwargs)
        ours = getattr(nsg, name)(**kwargs)
    ours.load_state_dict(theirs.state_dict())  # the same parameter names and shapes
    return theirs.double(), ours.double()


@pytest.mark.parametrize("name, kwargs", LAYERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(LAYERS)])
def test_layer_gives_pygs_outputs_and_gradients(name, kwargs):
    theirs, ours = twins(name, kwargs)
    for seed in (0, 1):  # a second graph: the pattern kept for the first must not be reused
        x, edge_index = graph(seed)
        expected = theirs(x, edge_index)
        (dx_expected, *dparams_expected) = torch.autograd.grad(expected.square().sum(), [x, *theirs.parameters()])
        out = ours(x, edge_index)
        (dx, *dparams) = torch.autograd.grad(out.square().sum(), [x, *ours.parameters()])
        torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(dx, dx_expected, rtol=1e-10, atol=1e-12)
        for got, want in zip(dparams, dparams_expected):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_bipartite_sage_and_the_aggregate_helper():
    rng = np.random.default_rng(3)
    x_src = torch.tensor(rng.standard_normal((7, 6)))
    x_dst = torch.tensor(rng.standard_normal((4, 6)))
    edge_index = torch.as_tensor(np.stack([rng.integers(0, 7, 15), rng.integers(0, 4, 15)]))
    torch.manual_seed(0)
    theirs = pyg_nn.SAGEConv((6, 6), 3).double()
    ours = nsg.SAGEConv((6, 6), 3).double()
    ours.load_state_dict(theirs.state_dict())
    torch.testing.assert_close(ours((x_src, x_dst), edge_index), theirs((x_src, x_dst), edge_index))
    summed = nsg.aggregate(edge_index, x_src, size=(7, 4))
    expected = torch.zeros(4, 6, dtype=torch.float64).index_add(0, edge_index[1], x_src[edge_index[0]])
    torch.testing.assert_close(summed, expected)


def test_bad_aggregate_arguments_are_refused_by_name():
    x = torch.ones(3, 2)
    with pytest.raises(TypeError, match="edge_index must be a"):
        nsg.aggregate(torch.ones(3, 3), x)
    with pytest.raises(ValueError, match="takes no edge values"):
        nsg.aggregate(torch.tensor([[0, 1], [1, 2]]), x, edge_values=torch.ones(2), reduce="max")
    with pytest.raises(ValueError, match="reduce must be"):
        nsg.aggregate(torch.tensor([[0, 1], [1, 2]]), x, reduce="prod")


@pytest.mark.parametrize("name, kwargs", LAYERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(LAYERS)])
def test_layer_under_bfloat16_autocast_stays_near_float32(name, kwargs):
    """Under ``torch.autocast`` the aggregation runs in bfloat16 (numbasparse.torch's rule): the
    layer's output is within a few bfloat16 roundings of its float32 output, and it trains."""
    _, ours = twins(name, kwargs)
    ours = ours.float()
    x, edge_index = graph(2)
    x = x.detach().float().requires_grad_()
    expected = ours(x, edge_index)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = ours(x, edge_index)
    assert (out.float() - expected).norm() <= 8 * 2.0**-8 * expected.norm()
    out.float().square().sum().backward()
    assert x.grad.dtype == torch.float32 and torch.isfinite(x.grad).all()


def test_aggregate_refuses_float_node_ids_and_sizes():
    ei = torch.tensor([[0., 1, 2, 3], [1, 2, 3, 0]])
    with pytest.raises(TypeError, match="edge_index must hold integer node ids"):
        nsg.aggregate(ei, torch.rand(4, 3))
    with pytest.raises(TypeError, match="size must hold integers"):
        nsg.aggregate(ei.long(), torch.rand(4, 3), size=(4.0, 4.0))


def test_aggregate_refuses_edge_values_of_another_length():
    ei = torch.tensor([[0, 1, 2, 3, 3], [1, 2, 3, 0, 0]])
    with pytest.raises(ValueError, match="edge_values must have one row per edge"):
        nsg.aggregate(ei, torch.rand(4, 3), edge_values=torch.ones(3))
