"""Dense, loop-based reference for the capped push-flow PPR of DP-PushFlowCap (Epasto et al., NeurIPS 2022).

Written for clarity, not speed: it is the oracle that the sensitivity brute force and the torch implementation
(`pyg_private.utils.push_flow`) are checked against. See /work/shared/specs/noisy_diffusion.md §4.1.

Algorithm (synchronous: every node pushes in every iteration, all from the same old residual):

    r = e_s; p = 0; h = 0; cap = eta * d          (cap[s] = +inf in personalized mode)
    repeat iters times:
        f = min(r, cap - h)                       # flow each node pushes now (>= 0)
        h += f; r -= f
        p += alpha * f                            # restart share is settled
        r += (1 - alpha)/2 * f                    # lazy half stays at the pusher
        r += (1 - alpha)/2 * A D^-1 f             # other half split equally among the neighbours
    return p

This approximates lazy PPR with restart `alpha` and walk W = (I + A D^-1)/2. Note p = alpha * h throughout.

Isolated nodes (degree 0) have cap 0, so they never push and any residual on them stays there forever. The one
exception is the personalized seed, whose cap is +inf whatever its degree: an isolated personalized seed pushes,
keeps its lazy half and would send the other half to its neighbours; it has none, so that (1 - alpha)/2 * f share
is simply lost (A D^-1 f has no entry for it), exactly as in the reference code.
"""
import numpy as np


def reference_push_flow(adj, seed, alpha, iters, eta, personalized):
    """Return the (noise-free) capped push-flow vector p in R^n for one seed node.

    adj: n x n symmetric 0/1 matrix with zero diagonal (a simple undirected graph).
    seed: index of the seed node (the walk starts from e_seed).
    alpha: restart probability in (0, 1).
    iters: number of synchronous push iterations (>= 0).
    eta: cap parameter; node v may push at most eta * deg(v) in total over all iterations.
    personalized: if True the seed is uncapped (cap = +inf), otherwise it is capped like every other node.
    """
    return reference_push_flow_trajectory(adj, seed, alpha, iters, eta, personalized)[-1]


def reference_push_flow_trajectory(adj, seed, alpha, iters, eta, personalized):
    """p after 0, 1, ..., iters iterations, as an (iters + 1) x n array (row 0 is all zeros).

    The algorithm is causal (iteration t never looks at `iters`), so row t equals
    reference_push_flow(..., iters=t, ...): one run gives every shorter horizon for free. Arguments as in
    `reference_push_flow`.
    """
    adj = np.asarray(adj)
    n = adj.shape[0]
    assert adj.shape == (n, n), "adjacency must be square"
    assert np.all((adj == 0) | (adj == 1)), "adjacency must be 0/1"
    assert np.array_equal(adj, adj.T), "adjacency must be symmetric (undirected graph)"
    assert np.all(np.diag(adj) == 0), "no self loops"
    assert 0 <= seed < n
    assert 0.0 < alpha < 1.0
    assert iters >= 0 and eta >= 0

    neighbours = [[u for u in range(n) if adj[v, u] == 1] for v in range(n)]
    degree = [len(neighbours[v]) for v in range(n)]

    cap = [eta * degree[v] for v in range(n)]
    if personalized:
        cap[seed] = float("inf")

    r = [0.0] * n
    r[seed] = 1.0
    p = [0.0] * n
    h = [0.0] * n
    history = [list(p)]

    for _ in range(iters):
        # 1. Everybody decides how much to push, from the residual at the START of the iteration.
        f = [0.0] * n
        for v in range(n):
            remaining_cap = cap[v] - h[v]  # +inf - h = +inf for the personalized seed
            # max(0, .) only guards against a rounding ulp (h may end up a hair above cap); it never binds in
            # exact arithmetic because h[v] <= cap[v] is an invariant.
            f[v] = max(0.0, min(r[v], remaining_cap))

        # 2. Apply all the pushes at once.
        new_r = list(r)
        for v in range(n):
            if f[v] == 0.0:
                continue
            h[v] += f[v]
            new_r[v] -= f[v]
            p[v] += alpha * f[v]
            new_r[v] += (1.0 - alpha) / 2.0 * f[v]
            # Only a node with neighbours gets here unless it is the isolated personalized seed, in which
            # case this loop is empty and the share is lost (see module docstring).
            for u in neighbours[v]:
                new_r[u] += (1.0 - alpha) / 2.0 * f[v] / degree[v]
        r = new_r
        history.append(list(p))

    return np.array(history, dtype=np.float64)


def sensitivity_bound(alpha, iters, eta):
    """The claimed L1 sensitivity Delta1 = (3 - alpha) * (1 - (1 - alpha)**iters) * eta."""
    return (3.0 - alpha) * (1.0 - (1.0 - alpha) ** iters) * eta
