"""Logistic regression by Newton's method (iteratively reweighted least squares), NumPy only:
the selector's training, kept small enough to read (no scikit-learn dependency)."""
import numpy as np


def fit_logistic(X, y, *, weights=None, l2=1e-4, iterations=50):
    """Fit ``P(y=1 | x) = sigmoid(w . (x - mean) / scale + b)``.

    X: (samples, features); y: 0/1 labels; weights: per-sample weights (default 1).
    Returns (mean, scale, coef, intercept).  ``l2`` is a small ridge on ``coef`` so that
    separable data still converge.
    """
    X = np.asarray(X, np.float64)
    y = np.asarray(y, np.float64)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError("X must be (samples, features) and y (samples,)")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("y must hold 0/1 labels")
    weights = np.ones(len(y)) if weights is None else np.asarray(weights, np.float64)
    mean = np.average(X, axis=0, weights=weights)
    scale = np.sqrt(np.average((X - mean) ** 2, axis=0, weights=weights))
    scale[scale == 0] = 1.0
    Z = np.hstack([(X - mean) / scale, np.ones((len(y), 1))])
    theta = np.zeros(Z.shape[1])
    ridge = np.full(Z.shape[1], l2 * weights.sum())
    ridge[-1] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(Z @ theta, -30, 30)))
        gradient = Z.T @ (weights * (p - y)) + ridge * theta
        hessian = (Z * (weights * p * (1 - p))[:, None]).T @ Z + np.diag(ridge) + 1e-9 * np.eye(Z.shape[1])
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return mean, scale, theta[:-1], float(theta[-1])


def predict(X, mean, scale, coef, intercept):
    """0/1 predictions of a fitted model."""
    return ((np.asarray(X, np.float64) - mean) / scale @ coef + intercept > 0).astype(np.int64)
