"""GCON's objective-perturbation noise (Alg. 2, specs/gcon.md §2.4): columns with density
proportional to exp(-beta ||b||_2), i.e. a Gamma(d, rate=beta) radius times a uniform direction.

Moment checks use a fixed seed and a few standard errors; the KS test of the radius also rejects a
deliberately wrong radius (shape d - 1), so it can fail.
"""
import math

import numpy as np
import pytest
import scipy.stats as st
import torch

from pyg_private.mechanisms import sample_objective_noise

N = 20_000  # independent columns per draw


def _draw(d, beta, seed=0, n=N):
    g = torch.Generator().manual_seed(seed)
    B = sample_objective_noise(d, n, beta, generator=g)
    assert B.shape == (d, n) and B.dtype == torch.float64
    return B.numpy()


@pytest.mark.parametrize("d, beta", [(1, 2.0), (3, 0.5), (16, 1.42)])
def test_radius_moments(d, beta):
    r = np.linalg.norm(_draw(d, beta), axis=0)
    mean, var = d / beta, d / beta ** 2
    se_mean = math.sqrt(var / N)
    se_var = var * math.sqrt((2 + 6 / d) / N)  # Gamma(d): excess kurtosis 6/d
    assert abs(r.mean() - mean) < 4 * se_mean
    assert abs(r.var(ddof=1) - var) < 4 * se_var


@pytest.mark.parametrize("d", [2, 5])
def test_directions_uniform(d):
    B = _draw(d, 1.0, seed=1)
    U = B / np.linalg.norm(B, axis=0)
    # mean of unit vectors ~ 0: each coordinate has variance 1/d
    assert np.abs(U.mean(axis=1)).max() < 4.5 * math.sqrt(1 / (d * N))
    # E[u u^T] = I/d: Var(u_i^2) = 3/(d(d+2)) - 1/d^2, Var(u_i u_j) = 1/(d(d+2))
    M = U @ U.T / N
    se_diag = math.sqrt((3 / (d * (d + 2)) - 1 / d ** 2) / N)
    se_off = math.sqrt(1 / (d * (d + 2)) / N)
    assert np.abs(np.diag(M) - 1 / d).max() < 4.5 * se_diag
    assert np.abs(M - np.diag(np.diag(M))).max() < 4.5 * se_off
    # the radius is independent of the direction: no correlation with a coordinate of the direction
    r = np.linalg.norm(B, axis=0)
    assert abs(np.corrcoef(r, U[0] ** 2)[0, 1]) < 4.5 / math.sqrt(N)


@pytest.mark.parametrize("d, beta", [(1, 1.0), (4, 3.0), (16, 0.065)])
def test_radius_ks_gamma(d, beta):
    r = np.linalg.norm(_draw(d, beta, seed=2), axis=0)
    assert st.kstest(r, st.gamma(a=d, scale=1 / beta).cdf).pvalue > 1e-3
    # the same test rejects a wrong radius: shape d - 1 (or, for d = 1, half the rate)
    wrong = st.gamma(a=d - 1, scale=1 / beta) if d > 1 else st.gamma(a=1, scale=2 / beta)
    assert st.kstest(r, wrong.cdf).pvalue < 1e-6


def test_one_dimension_is_laplace():
    """d = 1: density prop. to exp(-beta |b|), i.e. Laplace(0, 1/beta)."""
    b = _draw(1, 2.5, seed=3)[0]
    assert st.kstest(b, st.laplace(scale=1 / 2.5).cdf).pvalue > 1e-3
    assert st.kstest(b, st.laplace(scale=1 / 2.0).cdf).pvalue < 1e-6


def test_projection_matches_density():
    """A coordinate of b with density prop. to exp(-beta ||b||) in d = 3 has the marginal
    (beta/4)(1 + beta |t|) exp(-beta |t|) (integrate the density over the other two coordinates)."""
    beta = 1.7
    t = _draw(3, beta, seed=4)[0]

    def cdf(x):
        x = np.asarray(x)
        ax = np.abs(x)
        tail = 0.5 * np.exp(-beta * ax) * (1 + beta * ax / 2)  # P(T > |x|)
        return np.where(x >= 0, 1 - tail, tail)

    assert st.kstest(t, cdf).pvalue > 1e-3


def test_reproducible_and_independent_columns():
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    a = sample_objective_noise(6, 4, 0.8, generator=g1)
    b = sample_objective_noise(6, 4, 0.8, generator=g2)
    assert torch.equal(a, b)
    c = sample_objective_noise(6, 4, 0.8, generator=g1)  # the generator advanced: fresh noise
    assert not torch.equal(a, c)
    assert not torch.equal(a[:, 0], a[:, 1])
    assert sample_objective_noise(6, 4, 0.8).shape == (6, 4)  # no generator


def test_infinite_beta_and_dtype():
    z = sample_objective_noise(5, 3, math.inf)
    assert z.shape == (5, 3) and z.dtype == torch.float64 and not z.any()
    f = sample_objective_noise(5, 3, 2.0, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
    assert f.dtype == torch.float32 and torch.isfinite(f).all()
    d64 = sample_objective_noise(5, 3, 2.0, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(f, d64.float())


def test_errors():
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="beta"):
            sample_objective_noise(3, 2, bad)
    with pytest.raises(ValueError, match="dim"):
        sample_objective_noise(0, 2, 1.0)
    with pytest.raises(TypeError, match="dim"):
        sample_objective_noise(2.5, 2, 1.0)
    with pytest.raises(ValueError, match="num_classes"):
        sample_objective_noise(3, 0, 1.0)
    with pytest.raises(TypeError, match="dtype"):
        sample_objective_noise(3, 2, 1.0, dtype=torch.int64)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="generator"):
            sample_objective_noise(3, 2, 1.0, generator=torch.Generator(), device="meta")
