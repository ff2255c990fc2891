"""The GNN example trains with numbasparse's autograd ops as well as with plain PyTorch."""
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
import gnn  # noqa: E402


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_numbasparse_and_torch_models_learn_alike(model):
    ours, _ = gnn.train(model, "numbasparse", "cpu", epochs=30)
    theirs, _ = gnn.train(model, "torch", "cpu", epochs=30)
    assert ours > 0.5 and abs(ours - theirs) < 0.02


@pytest.mark.parametrize("kind", ["sage", "gat"])
def test_pyg_layers_and_numbasparse_layers_learn_alike(kind):
    pytest.importorskip("torch_geometric")
    import pyg_layers

    results = pyg_layers.compare(kind=kind, epochs=30)
    (theirs, _), (ours, _) = results["pyg"], results["numbasparse"]
    assert ours > 0.5 and abs(ours - theirs) < 0.02
    assert results["first output, relative difference"] < 1e-5
