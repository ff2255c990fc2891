"""numbasparse.torch: forward values and gradcheck in float64 (CPU tensors via the CPU
backend; CUDA tensors on the GPU, marked gpu)."""
import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")
nst = pytest.importorskip("numbasparse.torch")

from numbasparse.reference import attention_reference, sddmm_reference, sddmm_spmm_reference, spmm_reference  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _setup(device, shape=(7, 6), density=0.4, seed=None):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    rng = np.random.default_rng(seed)
    A = sp.random(*shape, density=density, format="csr", random_state=rng)
    A = sp.csr_matrix(A.toarray() * (rng.random(shape[0]) > 0.2)[:, None])  # empty rows
    A.data = rng.uniform(0.5, 1.5, A.nnz)
    graph = nst.Graph(A, device=device, dtype=torch.float64)
    return rng, A, graph


def _tensor(rng, shape, device):
    return torch.tensor(rng.standard_normal(shape), dtype=torch.float64, device=device, requires_grad=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
def test_spmm_forward_and_gradcheck(device, reduce):
    rng, A, graph = _setup(device)
    B = _tensor(rng, (6, 5), device)
    values = graph.values.clone().requires_grad_(True)
    C = nst.spmm(graph, B, values, reduce=reduce)
    np.testing.assert_allclose(C.detach().cpu().numpy(), spmm_reference(A, B.detach().cpu().numpy(), reduce),
                               rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda v, b: nst.spmm(graph, b, v, reduce=reduce), (values, B))


@pytest.mark.parametrize("device", DEVICES)
def test_sddmm_forward_and_gradcheck(device):
    rng, A, graph = _setup(device)
    X, Y = _tensor(rng, (7, 4), device), _tensor(rng, (6, 4), device)
    values = graph.values.clone().requires_grad_(True)
    s = nst.sddmm(graph, X, Y, values)
    np.testing.assert_allclose(s.detach().cpu().numpy(),
                               sddmm_reference(A, X.detach().cpu().numpy(), Y.detach().cpu().numpy()), rtol=1e-10)
    assert torch.autograd.gradcheck(lambda v, x, y: nst.sddmm(graph, x, y, v), (values, X, Y))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["sddmm_spmm", "graph_attention"])
def test_fused_ops_forward_and_gradcheck(device, op):
    rng, A, graph = _setup(device)
    X, Y, Z = _tensor(rng, (7, 3), device), _tensor(rng, (6, 3), device), _tensor(rng, (6, 4), device)
    values = graph.values.clone().requires_grad_(True)
    fn = getattr(nst, op)
    reference = {"sddmm_spmm": sddmm_spmm_reference, "graph_attention": attention_reference}[op]
    out = fn(graph, X, Y, Z, values)
    host = [t.detach().cpu().numpy() for t in (X, Y, Z)]
    np.testing.assert_allclose(out.detach().cpu().numpy(), reference(A, *host), rtol=1e-9, atol=1e-12)
    assert torch.autograd.gradcheck(lambda v, x, y, z: fn(graph, x, y, z, v), (values, X, Y, Z))


def test_values_must_match_operands():
    rng, A, graph = _setup("cpu")
    B = _tensor(rng, (6, 2), "cpu")
    with pytest.raises(ValueError, match="shape"):
        nst.spmm(graph, B, torch.ones(A.nnz + 1, dtype=torch.float64))
    with pytest.raises(TypeError, match="match"):
        nst.spmm(graph, B, torch.ones(A.nnz, dtype=torch.float32))
    with pytest.raises(ValueError, match="reduce"):
        nst.spmm(graph, B, reduce="prod")


@pytest.mark.gpu
def test_repeated_calls_keep_one_matrix_per_values_and_see_in_place_updates():
    """The device matrix of the values passed last is reused (its launches stay bound and the
    calls are replayed), and reads the values at each call."""
    rng, A, graph = _setup("cuda", shape=(40, 30))
    values = graph.values.clone()
    assert graph.matrix(values) is graph.matrix(values)
    B = torch.tensor(rng.standard_normal((30, 8)), device="cuda")
    for _ in range(5):
        C = nst.spmm(graph, B, values)
    np.testing.assert_allclose(C.cpu().numpy(), spmm_reference(A, B.cpu().numpy()), rtol=1e-10)
    values.mul_(2)  # in place: same memory, same matrix
    C = nst.spmm(graph, B, values)
    np.testing.assert_allclose(C.cpu().numpy(), 2 * spmm_reference(A, B.cpu().numpy()), rtol=1e-10)
    other = values.clone()
    assert graph.matrix(other) is not graph.matrix(values)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["spmm", "spmm_mean", "sddmm", "sddmm_spmm", "graph_attention"])
def test_second_derivatives_through_create_graph(device, op):
    """Backward passes are differentiable: gradgradcheck in float64, and a first-order gradient
    taken with create_graph=True carries a graph."""
    rng, A, graph = _setup(device, shape=(6, 5))
    values = graph.values.clone().requires_grad_(True)
    X, Y, Z = _tensor(rng, (6, 3), device), _tensor(rng, (5, 3), device), _tensor(rng, (5, 2), device)
    fns = {
        "spmm": (lambda v, b: nst.spmm(graph, b, v), (values, Z)),
        "spmm_mean": (lambda v, b: nst.spmm(graph, b, v, reduce="mean"), (values, Z)),
        "sddmm": (lambda v, x, y: nst.sddmm(graph, x, y, v), (values, X, Y)),
        "sddmm_spmm": (lambda v, x, y, z: nst.sddmm_spmm(graph, x, y, z, v), (values, X, Y, Z)),
        "graph_attention": (lambda v, x, y, z: nst.graph_attention(graph, x, y, z, v), (values, X, Y, Z)),
    }
    fn, inputs = fns[op]
    (grad,) = torch.autograd.grad(fn(*inputs).square().sum(), inputs[1], create_graph=True)
    assert grad.requires_grad
    assert torch.autograd.gradgradcheck(fn, inputs)


@pytest.mark.parametrize("device", DEVICES)
def test_custom_ops_pass_opcheck(device):
    """Schema, fake (meta) implementations, autograd registration and AOT dispatch of each op."""
    rng, A, graph = _setup(device)
    values = graph.values.clone().requires_grad_(True)
    X, Y, Z = _tensor(rng, (7, 3), device), _tensor(rng, (6, 3), device), _tensor(rng, (6, 4), device)
    B, C = _tensor(rng, (6, 5), device), _tensor(rng, (7, 5), device)
    ops = torch.ops.numbasparse
    rows = graph._rows
    for op, args in ((ops.spmm, (values, B, graph.key, False)), (ops.spmm, (values, C, graph.key, True)),
                     (ops.spmm_extremum, (values, B, rows, graph._cols, graph.key, "max")),
                     (ops.sddmm, (values, X, Y, graph.key)),
                     (ops.scores_times, (values, X, Y, Z, rows, graph.key, False)),
                     (ops.scores_times, (values, X, Y, Z, rows, graph.key, True))):
        torch.library.opcheck(op, args)


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_a_model_on_the_ops_compiles_with_fullgraph(model):
    """torch.compile(fullgraph=True) traces a GCN / attention layer built on the ops (no graph
    break) and gives the eager result, gradients included."""
    rng, A, graph = _setup("cpu", shape=(30, 30), density=0.2, seed=1)
    W = torch.tensor(rng.standard_normal((8, 4)), requires_grad=True)
    X = torch.tensor(rng.standard_normal((30, 8)), requires_grad=True)

    def forward(X, W):
        H = X @ W
        if model == "gcn":
            return torch.relu(nst.spmm(graph, H, reduce="mean")).sum()
        return nst.graph_attention(graph, H, H, H).square().sum()

    eager = forward(X, W)
    (eager_grad,) = torch.autograd.grad(eager, W)
    compiled = torch.compile(forward, fullgraph=True, backend="aot_eager")
    out = compiled(X, W)
    (grad,) = torch.autograd.grad(out, W)
    torch.testing.assert_close(out, eager)
    torch.testing.assert_close(grad, eager_grad)


@pytest.mark.parametrize("heads", [None, 3])
def test_edge_softmax_over_each_rows_entries_single_and_multi_head(heads):
    rng, A, graph = _setup("cpu")
    shape = (A.nnz,) if heads is None else (A.nnz, heads)
    scores = torch.tensor(rng.standard_normal(shape), requires_grad=True)
    weights = nst.edge_softmax(graph, scores)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    expected = np.empty(shape)
    s = scores.detach().numpy()
    for r in np.unique(rows):
        e = np.exp(s[rows == r] - s[rows == r].max(axis=0))
        expected[rows == r] = e / e.sum(axis=0)
    np.testing.assert_allclose(weights.detach().numpy(), expected, rtol=1e-12)
    assert torch.autograd.gradcheck(lambda x: nst.edge_softmax(graph, x), (scores,))
    with pytest.raises(ValueError, match="one per stored entry"):
        nst.edge_softmax(graph, scores[:-1])



def test_max_gradient_goes_to_the_first_of_tied_entries():
    A = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]))  # row 0: two entries, row 1: none
    graph = nst.Graph(A, dtype=torch.float64)
    B = torch.tensor([[2.0, 5.0], [2.0, 1.0], [9.0, 9.0]], dtype=torch.float64, requires_grad=True)
    C = nst.spmm(graph, B, reduce="max")
    assert C.tolist() == [[2.0, 5.0], [0.0, 0.0]]
    C.sum().backward()
    assert B.grad.tolist() == [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]  # column 0 tied: entry 0 takes it


def test_multi_head_spmm_and_sddmm_compute_each_head_with_its_values():
    rng, A, graph = _setup("cpu")
    heads = 3
    values = torch.tensor(rng.uniform(0.5, 1.5, (A.nnz, heads)), requires_grad=True)
    B = _tensor(rng, (6, heads, 4), "cpu")
    C = nst.spmm(graph, B, values)
    X, Y = _tensor(rng, (7, heads, 2), "cpu"), _tensor(rng, (6, heads, 2), "cpu")
    S = nst.sddmm(graph, X, Y, values)
    assert C.shape == (7, heads, 4) and S.shape == (A.nnz, heads)
    for h in range(heads):
        Ah = sp.csr_matrix((values[:, h].detach().numpy(), A.indices, A.indptr), shape=A.shape)
        np.testing.assert_allclose(C[:, h].detach().numpy(), spmm_reference(Ah, B[:, h].detach().numpy()), rtol=1e-10)
        np.testing.assert_allclose(S[:, h].detach().numpy(),
                                   sddmm_reference(Ah, X[:, h].detach().numpy(), Y[:, h].detach().numpy()), rtol=1e-10)
    assert torch.autograd.gradcheck(lambda v, b: nst.spmm(graph, b, v), (values, B))
    assert torch.autograd.gradcheck(lambda v, x, y: nst.sddmm(graph, x, y, v), (values, X, Y))
    shared = nst.spmm(graph, B)  # the graph's values, one set for every head
    np.testing.assert_allclose(shared[:, 0].detach().numpy(), spmm_reference(A, B[:, 0].detach().numpy()), rtol=1e-10)


@pytest.mark.gpu
@pytest.mark.parametrize("reduce", ["sum", "max"])
def test_cuda_graph_capture_of_a_training_step_replays_it(reduce):
    """A GCN-style forward and backward captured in a CUDA graph (after a warm-up on the capture
    stream, which builds the plans and per-stream buffers) and replayed on new inputs gives what
    eager calls give."""
    rng, A, graph = _setup("cuda", shape=(400, 300), density=0.03, seed=3)
    graph = nst.Graph(A, device="cuda", dtype=torch.float32)
    X = torch.zeros(300, 16, device="cuda")
    W = torch.tensor(rng.standard_normal((16, 8)), dtype=torch.float32, device="cuda", requires_grad=True)

    def step():
        W.grad = None
        loss = torch.relu(nst.spmm(graph, X @ W, reduce=reduce)).square().sum()
        loss.backward()
        return loss.detach(), W.grad

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(5):  # past REPLAY_FROM_CALL too
            step()
    torch.cuda.current_stream().wait_stream(stream)
    captured = torch.cuda.CUDAGraph()
    with torch.cuda.graph(captured, stream=stream):
        loss, grad = step()
    for _ in range(3):
        new = torch.tensor(rng.standard_normal((300, 16)), dtype=torch.float32, device="cuda")
        X.copy_(new)
        captured.replay()
        torch.cuda.synchronize()
        captured_loss, captured_grad = loss.clone(), grad.clone()
        eager_loss, eager_grad = step()
        # float32 sums through atomics add in another order on every run, and a gradient entry
        # can be a sum that nearly cancels: compare by norm (a stale replay would be far off)
        torch.testing.assert_close(captured_loss, eager_loss, rtol=1e-4, atol=0)
        assert ((captured_grad - eager_grad).norm() / eager_grad.norm()).item() < 1e-5


@pytest.mark.parametrize("op", ["spmm", "max", "sddmm", "attention"])
def test_a_temporary_graph_lives_until_its_backward(op):
    import gc

    rng, A, _ = _setup("cpu", shape=(8, 8), seed=4)
    X = _tensor(rng, (8, 3), "cpu")
    out = {"spmm": lambda g: nst.spmm(g, X), "max": lambda g: nst.spmm(g, X, reduce="max"),
           "sddmm": lambda g: nst.sddmm(g, X, X), "attention": lambda g: nst.graph_attention(g, X, X, X)}[op](
        nst.Graph(A, dtype=torch.float64))
    gc.collect()
    out.square().sum().backward()
    assert X.grad is not None and torch.isfinite(X.grad).all()


@pytest.mark.gpu
def test_a_graph_already_on_the_gpu_is_built_there():
    """Graph(CUDA sparse tensor, device="cuda"): pattern, transpose and matrices made on the GPU
    (no host pattern is ever made), forward and backward equal to the host-built Graph's."""
    rng, A, host_built = _setup("cuda", shape=(60, 50), density=0.1, seed=6)
    coo = A.tocoo()
    t = torch.sparse_coo_tensor(torch.tensor(np.stack([coo.row, coo.col])), torch.tensor(coo.data), A.shape,
                                device="cuda")
    graph = nst.Graph(t, device="cuda", dtype=torch.float64)
    X = _tensor(rng, (50, 4), "cuda")
    for g in (graph, host_built):
        out = nst.spmm(g, X, reduce="max") + nst.spmm(g, X)
        (grad,) = torch.autograd.grad(out.square().sum(), X)
        if g is graph:
            first = (out, grad)
    torch.testing.assert_close(first[0], out)
    torch.testing.assert_close(first[1], grad)
    assert graph._host_patterns == {}


def test_graph_values_never_share_the_callers_memory():
    values = torch.tensor([1.0, 2.0, 3.0])
    A = torch.sparse_coo_tensor(torch.tensor([[0, 1, 2], [1, 2, 0]]), values, (3, 3))
    g = nst.Graph(A)
    g.values.mul_(10)
    assert torch.equal(values, torch.tensor([1.0, 2.0, 3.0]))


# Half precision: results and gradients against float64 on the same 16-bit inputs.  Forward
# values round once (within u = 2^-11 float16, 2^-8 bfloat16, relative norm error); gradients
# are built from several half-precision operations, each rounding once: within 8u (README).
HALF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
HALF_OPS = ["spmm", "spmm_mean", "spmm_max", "sddmm", "sddmm_spmm", "graph_attention"]


def _half_case(op, graph, inputs, values):
    if op.startswith("spmm"):
        reduce = op.split("_")[1] if "_" in op else "sum"
        return nst.spmm(graph, inputs[0], values, reduce=reduce)
    return getattr(nst, op)(graph, *inputs, values)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("op", HALF_OPS)
def test_half_precision_results_and_gradients_match_float64(device, dtype, op):
    rng, A, graph64 = _setup(device, shape=(40, 30), density=0.2, seed=3)
    half = getattr(torch, dtype)
    shapes = {"sddmm": [(40, 8), (30, 8)]}.get(op, [(30, 16)] if op.startswith("spmm") else [(40, 8), (30, 8), (30, 16)])
    inputs = [torch.tensor(rng.standard_normal(s), device=device).to(half).requires_grad_() for s in shapes]
    values = graph64.values.to(half).requires_grad_()
    out = _half_case(op, graph64, inputs, values)
    assert out.dtype == half
    inputs64 = [t.detach().double().requires_grad_() for t in inputs]
    values64 = values.detach().double().requires_grad_()
    out64 = _half_case(op, graph64, inputs64, values64)
    u = HALF[dtype]
    assert (out.double() - out64).norm() <= u * out64.norm()
    weights = torch.tensor(rng.standard_normal(tuple(out.shape)), device=device)
    (out.double() * weights).sum().backward()
    (out64 * weights).sum().backward()
    for got, want in zip(inputs + [values], inputs64 + [values64]):
        assert got.grad.dtype == half
        if op != "spmm_max":  # (max's gradient goes to the largest product, which rounding may change)
            assert (got.grad.double() - want.grad).norm() <= 8 * u * want.grad.norm()


@pytest.mark.parametrize("device", DEVICES)
def test_float16_attention_gradients_stay_finite_where_the_scores_exceed_its_range(device):
    """Scores of 40 * 40 * 64 = 102400 overflow float16 (65504): the backward recomputes them in
    float32, as the fused forward keeps them, so the gradients match float32's."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    A = sp.csr_matrix(np.ones((2, 3)))
    V0 = np.random.default_rng(0).standard_normal((3, 4))
    grads = {}
    for dtype in (torch.float16, torch.float32):
        graph = nst.Graph(A, device=device, dtype=dtype)
        Q = torch.full((2, 64), 40.0, dtype=dtype, device=device, requires_grad=True)
        K = torch.full((3, 64), 40.0, dtype=dtype, device=device, requires_grad=True)
        V = torch.tensor(V0, dtype=dtype, device=device, requires_grad=True)
        out = nst.graph_attention(graph, Q, K, V)
        out.sum().backward()
        assert torch.isfinite(out).all() and all(torch.isfinite(t.grad).all() for t in (Q, K, V))
        grads[dtype] = [t.grad.double().cpu() for t in (Q, K, V)]
    for got, want in zip(grads[torch.float16], grads[torch.float32]):
        assert (got - want).norm() <= 2e-3 * max(want.norm(), 1.0)


@pytest.mark.parametrize("device", DEVICES)
def test_autocast_runs_the_ops_in_its_dtype_with_gradients_in_the_parameters_dtype(device):
    rng, A, _ = _setup(device, shape=(20, 20), density=0.3, seed=4)
    graph = nst.Graph(A, device=device)  # float32 values
    W = torch.tensor(rng.standard_normal((20, 8)), dtype=torch.float32, device=device, requires_grad=True)
    with torch.autocast(device, dtype=torch.bfloat16):
        C = nst.spmm(graph, W)
        s = nst.sddmm(graph, W, W)
        attention = nst.graph_attention(graph, W, W, W)
    assert C.dtype == s.dtype == attention.dtype == torch.bfloat16
    (C.float().sum() + s.float().sum() + attention.float().sum()).backward()
    assert W.grad.dtype == torch.float32
    with torch.autocast(device, dtype=torch.bfloat16):  # float64 stays float64, as for cuBLAS ops
        assert nst.spmm(nst.Graph(A, device=device, dtype=torch.float64), W.detach().double()).dtype == torch.float64


@pytest.mark.parametrize("device", DEVICES)
def test_the_mean_of_the_graphs_own_values_follows_them_changed_in_place(device):
    """The mean's scaled values are made once while the values are unchanged (so that a GPU
    call's matrix stays bound and replayed), and anew after an in-place change."""
    rng, A, graph = _setup(device, shape=(30, 20))
    B = torch.tensor(rng.standard_normal((20, 5)), device=device)
    for _ in range(5):
        C = nst.spmm(graph, B, reduce="mean")
    np.testing.assert_allclose(C.cpu().numpy(), spmm_reference(A, B.cpu().numpy(), "mean"), rtol=1e-10)
    if device == "cuda":  # five calls, one matrix
        assert len(graph._with_values) == 1 and len(next(iter(graph._with_values.values()))) == 1
    graph.values.mul_(3)
    C = nst.spmm(graph, B, reduce="mean")
    np.testing.assert_allclose(C.cpu().numpy(), 3 * spmm_reference(A, B.cpu().numpy(), "mean"), rtol=1e-10)


def test_autocast_casts_the_graphs_own_values_once_while_they_are_unchanged():
    """A new cast each step would give each step a new matrix, never bound or replayed on a GPU;
    values changed in place (or needing gradients) are cast again."""
    rng, A, _ = _setup("cpu")
    graph = nst.Graph(A, device="cpu")  # float32 values
    X = _tensor(rng, (A.shape[0], 3), "cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, first = nst._autocast(graph, X, None)
        _, again = nst._autocast(graph, X, None)
        graph.values.mul_(2)
        _, changed = nst._autocast(graph, X, None)
        _, given = nst._autocast(graph, X, graph.values)
    assert first is again and changed is not first and given is not changed
    assert changed.dtype == torch.bfloat16 and torch.equal(changed, graph.values.to(torch.bfloat16))


@pytest.mark.parametrize("x_shape, y_shape", [((7, 2, 2), (6, 3, 2)), ((7, 3, 2), (6, 2, 2)), ((7, 2, 2), (6, 2))])
def test_sddmm_refuses_operands_of_different_heads(x_shape, y_shape):
    rng, A, graph = _setup("cpu")
    with pytest.raises(ValueError, match="same number of heads"):
        nst.sddmm(graph, _tensor(rng, x_shape, "cpu"), _tensor(rng, y_shape, "cpu"))


def test_operations_name_an_operand_that_is_not_a_tensor_and_a_graph_that_is_not_a_graph():
    rng, A, graph = _setup("cpu")
    with pytest.raises(TypeError, match="B must be a torch tensor"):
        nst.spmm(graph, np.ones((6, 2)))
    with pytest.raises(TypeError, match="graph must be a numbasparse.torch.Graph"):
        nst.spmm(A, torch.ones(6, 2))
    with pytest.raises(ValueError, match="device must name a torch device"):
        nst.Graph(A, device="gpu")


def test_an_operand_of_an_integer_dtype_is_named():
    rng, A, graph = _setup("cpu")
    with pytest.raises(TypeError, match="B must have dtype float32"):
        nst.spmm(graph, torch.ones(6, 3, dtype=torch.int64))
