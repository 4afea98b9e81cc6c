"""Shared brute-force helper of the sensitivity tests."""
import itertools

import numpy as np


def sup_frobenius(M, rng, starts=2, iters=40):
    """Lower bounds of sup ||M X||_F over X with rows in the unit ball, per matrix of M [B, m, k]:
    exact for one column (every sign vector), and a power method with k columns."""
    k = M.shape[2]
    signs = np.array(list(itertools.product((-1.0, 1.0), repeat=k))).T
    best = np.linalg.norm(M @ signs, axis=1).max(axis=1)
    G = np.einsum("bji,bjl->bil", M, M)
    for _ in range(starts):
        X = rng.standard_normal((M.shape[0], k, k))
        X /= np.linalg.norm(X, axis=2, keepdims=True)
        for _ in range(iters):
            X = G @ X
            X /= np.maximum(np.linalg.norm(X, axis=2, keepdims=True), 1e-300)
        best = np.maximum(best, np.linalg.norm(M @ X, axis=(1, 2)))
    return best
