"""Which path each 16-row window takes in HC-SpMM: the dense-tile path or the CUDA-core path.

Candidate features per window: the paper's two (section IV-B), the sparsity of its condensed
16 x n_cols submatrix (1 - nnz / (16 n_cols)) and its number of non-zero columns n_cols, plus
log2(n_cols) and the mean nonzeros per row; a model names the ones it uses and decides
``w . standardise(features) + b > 0`` -> dense tiles.  One model per kind of tile (a tile costs
differently emulated on CUDA cores, on TF32 m16n8k8 and on 16-bit m16n8k16), shipped beside this
file as ``hc_selector_<kind>.json``, written by ``tools/train_hc_selector.py`` from the timings
that ``tools/hc_selector_data.py`` collects on the GPU (both in the repository).
"""
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

from ..preprocess.row_windows import WINDOW

FEATURES = ("sparsity", "n_cols", "log2_n_cols", "row_nnz")
#: Kinds of dense tile, each with its own model: float32 tiles emulated on CUDA cores, TF32
#: tiles (float32 operands, ``precision="tf32"``) and 16-bit tiles (float16 / bfloat16 operands,
#: one model: the same m16n8k16 tiles) on the tensor cores.
TILE_KINDS = ("emulated", "tf32", "half")


def model_path(tiles="emulated"):
    """Where the shipped model for ``tiles`` (one of :data:`TILE_KINDS`) lives."""
    if tiles not in TILE_KINDS:
        raise ValueError(f"tiles must be one of {TILE_KINDS}, got {tiles!r}")
    return Path(__file__).with_name(f"hc_selector_{tiles}.json")


def tile_kind(precision):
    """The tile kind timed under a ``tools/hc_selector_data.py --precision``."""
    return {"float32": "emulated", "tf32": "tf32", "float16": "half", "bfloat16": "half"}[precision]


@dataclass(frozen=True)
class Model:
    """A trained selector: standardisation, weights, intercept, and where it came from."""
    features: tuple
    lower: np.ndarray   # features are clipped to the range seen in training (no extrapolation)
    upper: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    meta: dict

    @property
    def columns(self):
        """Indices of the model's features in :data:`FEATURES`."""
        return np.array([FEATURES.index(f) for f in self.features], np.int64)

    @classmethod
    def from_json(cls, doc):
        unknown = set(doc["features"]) - set(FEATURES)
        if unknown:
            raise ValueError(f"selector model uses unknown features {sorted(unknown)}; known: {FEATURES}")
        return cls(tuple(doc["features"]), np.asarray(doc["lower"], np.float64),
                   np.asarray(doc["upper"], np.float64), np.asarray(doc["mean"], np.float64),
                   np.asarray(doc["scale"], np.float64), np.asarray(doc["coef"], np.float64),
                   float(doc["intercept"]),
                   {k: v for k, v in doc.items()
                    if k not in ("features", "lower", "upper", "mean", "scale", "coef", "intercept")})

    def to_json(self):
        return dict(self.meta, features=list(self.features), lower=self.lower.tolist(),
                    upper=self.upper.tolist(), mean=self.mean.tolist(),
                    scale=self.scale.tolist(), coef=self.coef.tolist(), intercept=self.intercept)


_loaded = {}


def load_model(path=None, tiles="emulated"):
    """The shipped model for ``tiles`` (or the one at ``path``), read once."""
    path = Path(path) if path is not None else model_path(tiles)
    if path not in _loaded:
        with open(path) as f:
            _loaded[path] = Model.from_json(json.load(f))
    return _loaded[path]


@njit(cache=True)
def features_of(nnz, n_cols):
    """(windows, len(FEATURES)) float64 features from nonzeros and non-zero columns per window."""
    out = np.zeros((nnz.shape[0], 4), np.float64)
    for w in range(nnz.shape[0]):
        if n_cols[w] > 0:
            out[w, 0] = 1.0 - nnz[w] / (WINDOW * n_cols[w])
            out[w, 2] = np.log2(n_cols[w])
        out[w, 1] = n_cols[w]
        out[w, 3] = nnz[w] / WINDOW
    return out


def window_features(windows):
    """(n_windows, len(FEATURES)) float64 array of the candidate features of a RowWindows."""
    return features_of(windows.nnz, windows.n_cols)


@njit(cache=True)
def _decide(features, columns, lower, upper, mean, scale, coef, intercept, nnz):
    out = np.zeros(features.shape[0], np.bool_)
    for w in range(features.shape[0]):
        z = intercept
        for f in range(columns.shape[0]):
            x = min(max(features[w, columns[f]], lower[f]), upper[f])
            z += coef[f] * (x - mean[f]) / scale[f]
        out[w] = z > 0.0 and nnz[w] > 0
    return out


def use_tiles(windows, model=None, tiles="emulated"):
    """Boolean per window of a :class:`RowWindows`: True -> dense-tile path (``model``, else the
    shipped model for ``tiles``)."""
    model = model or load_model(tiles=tiles)
    return _decide(window_features(windows), model.columns, model.lower, model.upper, model.mean,
                   model.scale, model.coef, model.intercept, windows.nnz)
