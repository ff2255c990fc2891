"""HC-SpMM's per-window core selector (paper 001, section IV-C): a logistic regression on
window features, trained offline on H100 timings of both kernel paths (one model per kind of
tile), applied in numba.njit."""
from .hc import FEATURES, TILE_KINDS, Model, load_model, use_tiles, window_features
from .train import fit_logistic

__all__ = ["FEATURES", "TILE_KINDS", "Model", "fit_logistic", "load_model", "use_tiles", "window_features"]
