"""HC-SpMM's per-window core selector (paper 001, section IV-C): a logistic regression on
window features, trained offline on H100 timings of both kernel paths, applied in numba.njit."""
from .hc import FEATURES, Model, load_model, use_tiles, window_features
from .train import fit_logistic

__all__ = ["FEATURES", "Model", "fit_logistic", "load_model", "use_tiles", "window_features"]
