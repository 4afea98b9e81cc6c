"""Shared brute-force helpers of the sensitivity tests."""
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


def block_diagonal_edge_index(masks, pairs, n):
    """One undirected graph holding every edge set of ``masks`` (bit k: pair k of ``pairs``) as its
    own block of ``n`` nodes, so that one layer call evaluates all of them at once."""
    import torch

    blocks = []
    for b, mask in enumerate(masks):
        e = [p for k, p in enumerate(pairs) if mask >> k & 1]
        if e:
            t = torch.tensor(e).t() + b * n
            blocks.append(torch.cat([t, t.flip(0)], 1))
    return torch.cat(blocks, 1) if blocks else torch.empty(2, 0, dtype=torch.long)
