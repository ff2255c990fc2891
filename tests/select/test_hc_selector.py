"""The HC-SpMM core selector: features, training, the shipped model, training inputs."""
import json

import numpy as np
import pytest
import scipy.sparse as sp

from numbasparse import graphs
from numbasparse.preprocess.row_windows import row_windows
from numbasparse.select import FEATURES, TILE_KINDS, Model, fit_logistic, load_model, use_tiles, window_features
from numbasparse.select.data import synthetic_windows, window_groups
from numbasparse.select.hc import model_path, tile_kind
from numbasparse.select.train import predict


def test_features_are_sparsity_columns_and_row_length():
    A = sp.csr_matrix(np.array([[1, 1, 0], [0, 1, 0]] + [[0, 0, 0]] * 14 + [[0, 0, 1]]))
    f = window_features(row_windows(A))
    assert FEATURES == ("sparsity", "n_cols", "log2_n_cols", "row_nnz")
    np.testing.assert_allclose(f, [[1 - 3 / 32, 2, 1, 3 / 16], [1 - 1 / 16, 1, 0, 1 / 16]])


def test_logistic_regression_finds_a_separating_boundary():
    rng = np.random.default_rng(0)
    X = rng.random((400, 2)) * [1, 128]
    y = (X[:, 0] + X[:, 1] / 64 < 1.2).astype(int)
    fitted = fit_logistic(X, y)
    assert (predict(X, *fitted) == y).mean() > 0.97


def test_logistic_regression_rejects_bad_labels():
    with pytest.raises(ValueError, match="0/1"):
        fit_logistic(np.zeros((3, 2)), np.array([0, 2, 1]))


@pytest.mark.parametrize("tiles", TILE_KINDS)
def test_every_kind_of_tile_ships_a_model_that_decides(tiles):
    doc = json.loads(model_path(tiles).read_text())
    assert set(doc["features"]) <= set(FEATURES) and "provenance" in doc and "gpu" in doc
    assert doc["tiles"] == tiles and load_model(tiles=tiles).meta["tiles"] == tiles
    rw = row_windows(graphs.default_graph())
    choice = use_tiles(rw, tiles=tiles)
    assert choice.dtype == np.bool_ and choice.shape == (rw.n_windows,)
    assert not choice[rw.nnz == 0].any()


def test_an_unknown_kind_of_tile_is_named_in_the_error():
    with pytest.raises(ValueError, match="tiles must be one of"):
        load_model(tiles="int8")


def test_each_timed_precision_trains_the_model_of_its_kind_of_tile():
    assert [tile_kind(p) for p in ("float32", "tf32", "float16", "bfloat16")] == ["emulated", "tf32", "half", "half"]


@pytest.mark.parametrize("tiles", TILE_KINDS)
def test_dense_windows_go_to_tiles_and_scattered_to_cores(tiles):
    model = load_model(tiles=tiles)
    dense = row_windows(sp.csr_matrix(np.ones((16, 8))))
    scattered = row_windows(sp.csr_matrix((np.ones(16), (np.arange(16), np.arange(16) * 7)), shape=(16, 200)))
    assert use_tiles(dense, model).all() and not use_tiles(scattered, model).any()


def test_model_json_round_trip():
    model = Model(("sparsity", "row_nnz"), np.zeros(2), np.ones(2), np.zeros(2), np.ones(2), np.array([1.0, -2.0]), 0.5,
                  {"provenance": "test"})
    assert Model.from_json(json.loads(json.dumps(model.to_json()))).intercept == 0.5
    with pytest.raises(ValueError, match="features"):
        Model.from_json(dict(model.to_json(), features=["x"]))


@pytest.mark.parametrize("n_cols, sparsity", [(1, 0.5), (24, 0.75), (130, 15 / 16), (8, 0.0)])
def test_synthetic_windows_have_the_asked_features(n_cols, sparsity):
    A = synthetic_windows(20, n_cols, sparsity, n_columns_total=500, seed=1)
    rw = row_windows(A)
    assert A.shape == (320, 500) and np.all(rw.n_cols == n_cols)
    expected = min(max(round((1 - sparsity) * 16 * n_cols), n_cols), 16 * n_cols)
    assert np.all(rw.nnz == expected)


def test_window_groups_cover_similar_windows():
    A = graphs.default_graph()
    groups = window_groups(A, min_windows=10)
    assert groups and sum(count for _, count, _ in groups) <= row_windows(A).n_windows
    for features, count, sub in groups:
        assert sub.shape[0] <= 16 * count and sub.shape[1] == A.shape[1]


def test_features_are_clipped_to_the_training_range():
    """A window wider than any trained on is judged as the widest trained window."""
    model = Model(("n_cols",), np.array([1.0]), np.array([130.0]), np.array([0.0]), np.array([1.0]),
                  np.array([-1.0]), 200.0, {})
    wide = row_windows(sp.csr_matrix((np.ones(16 * 40), (np.repeat(np.arange(16), 40), np.arange(640))),
                                     shape=(16, 640)))
    assert wide.n_cols[0] == 640 and use_tiles(wide, model).all()  # unclipped: 200 - 640 < 0, cores
