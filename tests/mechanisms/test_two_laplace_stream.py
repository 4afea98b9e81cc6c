r"""TwoLaplaceStream: the law of Lap(0, b) + Lap(0, b), independence, reproducibility, buffers.

The sum X = L1 + L2 of two independent Laplace(0, b) has characteristic function
1 / (1 + b^2 t^2)^2 and density, from the convolution of e^{-|y|/b} / (2b) with itself,

    f(x) = (1 / (4b)) (1 + |x|/b) e^{-|x|/b}.

Integrating the tail, for x >= 0: int_x^inf f = e^{-x/b} (2 + x/b) / 4, so

    F(x) = 1 - e^{-x/b} (2 + x/b) / 4   (x >= 0),   F(x) = e^{x/b} (2 - x/b) / 4   (x < 0),

which gives F(0) = 1/2. Moments: E X = 0, Var X = 2 * 2b^2 = 4b^2,
E|X| = 2 int_0^inf x f = (1/(2b)) (b^2 + 2b^2) = 1.5 b, and E X^4 = 2*24b^4 + 6*(2b^2)^2 = 72 b^4.
"""
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from pyg_private.mechanisms._noise import TwoLaplaceStream


def two_laplace_cdf(x, b):
    z = np.abs(np.asarray(x, dtype=np.float64)) / b
    tail = np.exp(-z) * (2.0 + z) / 4.0  # P(X > |x|)
    return np.where(np.asarray(x) >= 0, 1.0 - tail, tail)


def _draws(stream, times):
    return torch.stack([stream.sample().clone() for _ in range(times)])


def test_cdf_formula_matches_numerical_convolution():
    # the derived density and CDF against numerical integration (guards the derivation itself)
    b = 1.7

    def lap(y):
        return math.exp(-abs(y) / b) / (2 * b)

    def dens(y):
        return (1 + abs(y) / b) * math.exp(-abs(y) / b) / (4 * b)

    for x in (-5 * b, -b, 0.0, 0.3 * b, 2 * b, 7 * b):
        lo, hi = min(0.0, x), max(0.0, x)  # the integrand has kinks at 0 and x
        conv = sum(integrate.quad(lambda y: lap(y) * lap(x - y), u, v)[0]
                   for u, v in ((-np.inf, lo), (lo, hi), (hi, np.inf)))
        assert conv == pytest.approx(dens(x), rel=1e-7)
        left = integrate.quad(dens, -np.inf, min(x, 0.0))[0] + (integrate.quad(dens, 0.0, x)[0] if x > 0 else 0.0)
        assert two_laplace_cdf(x, b) == pytest.approx(left, rel=1e-7)
    assert two_laplace_cdf(0.0, b) == 0.5
    assert integrate.quad(lambda y: abs(y) * dens(y), -np.inf, np.inf)[0] == pytest.approx(1.5 * b, rel=1e-7)
    assert integrate.quad(lambda y: y * y * dens(y), -np.inf, np.inf)[0] == pytest.approx(4 * b * b, rel=1e-7)


def test_moments_and_kolmogorov_smirnov():
    b = 0.37
    stream = TwoLaplaceStream((500, 40), b, device=torch.device("cpu"), generator=torch.Generator().manual_seed(0))
    x = _draws(stream, 10).numpy().ravel()  # 200k samples
    n = x.size
    assert x.dtype == np.float64 and np.isfinite(x).all()
    # standard errors: sd(mean) = 2b/sqrt(n), sd(var) = sqrt(72 - 16) b^2/sqrt(n), sd(|X|) = sqrt(1.75) b/sqrt(n)
    assert abs(x.mean()) < 5 * 2 * b / math.sqrt(n)
    assert abs(x.var() - 4 * b * b) < 5 * math.sqrt(56.0) * b * b / math.sqrt(n)
    assert abs(np.abs(x).mean() - 1.5 * b) < 5 * math.sqrt(1.75) * b / math.sqrt(n)
    assert abs(np.median(x)) < 0.01 * b
    p = stats.kstest(x, lambda t: two_laplace_cdf(t, b)).pvalue
    assert p > 1e-3
    # the KS test has power: one Laplace of the same variance (scale sqrt(2) b) is rejected,
    # and so is the sum of two Laplace with a 4% wrong scale
    assert stats.kstest(x, stats.laplace(scale=math.sqrt(2) * b).cdf).pvalue < 1e-10
    assert stats.kstest(x, lambda t: two_laplace_cdf(t, 1.04 * b)).pvalue < 1e-6


def test_one_big_draw_and_a_scalar_shape():
    b = 3.0
    stream = TwoLaplaceStream((200_000,), b, device="cpu", generator=torch.Generator().manual_seed(1))
    x = stream.sample().numpy().copy()
    assert stats.kstest(x, lambda t: two_laplace_cdf(t, b)).pvalue > 1e-3
    scalar = TwoLaplaceStream((), 1.0, device="cpu", generator=torch.Generator().manual_seed(2))
    assert scalar.sample().shape == ()


def test_consecutive_samples_and_neighbouring_entries_are_uncorrelated():
    stream = TwoLaplaceStream((20_000,), 1.0, device="cpu", generator=torch.Generator().manual_seed(3))
    x = _draws(stream, 11).numpy()
    tol = 5 / math.sqrt(x.shape[1])  # |corr| of independent samples: sd 1/sqrt(n)
    for t in range(10):
        assert abs(np.corrcoef(x[t], x[t + 1])[0, 1]) < tol
        assert abs(np.corrcoef(x[t, :-1], x[t, 1:])[0, 1]) < tol
        # the magnitudes too (a shared uniform would correlate |X|, not X)
        assert abs(np.corrcoef(np.abs(x[t]), np.abs(x[t + 1]))[0, 1]) < tol
    # the sign is independent of the magnitude: E[X | |X| > 2] = 0
    big = x[np.abs(x) > 2]
    assert abs(np.sign(big).mean()) < 5 / math.sqrt(big.size)


def test_same_generator_seed_reproduces_the_stream():
    def run(seed, times=4):
        s = TwoLaplaceStream((7, 3), 0.5, device="cpu", generator=torch.Generator().manual_seed(seed))
        return _draws(s, times)

    a, b, c = run(42), run(42), run(43)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert not torch.equal(a[0], a[1])  # fresh noise at every call
    # without a generator the stream is seeded from OS entropy: two streams differ
    u = TwoLaplaceStream((50,), 1.0, device="cpu").sample().clone()
    v = TwoLaplaceStream((50,), 1.0, device="cpu").sample().clone()
    assert not torch.equal(u, v)


def test_the_output_buffer_is_reused():
    # documented behaviour: sample() returns the SAME tensor every time, overwritten in place,
    # so a caller must consume (or clone) it before the next call
    stream = TwoLaplaceStream((4, 5), 1.0, device="cpu", generator=torch.Generator().manual_seed(5))
    first = stream.sample()
    kept = first.clone()
    second = stream.sample()
    assert second is first and second.data_ptr() == first.data_ptr()
    assert not torch.equal(first, kept)  # the earlier result was overwritten
    assert first.shape == (4, 5) and first.dtype == torch.float64 and first.device.type == "cpu"


def test_generator_on_another_device_raises():
    with pytest.raises(ValueError, match="generator"):
        TwoLaplaceStream((3,), 1.0, device="meta", generator=torch.Generator())
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="generator"):
            TwoLaplaceStream((3,), 1.0, device="cpu", generator=torch.Generator(device="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_stream_law_and_reproducibility():
    b = 0.8
    gen = torch.Generator(device="cuda").manual_seed(0)
    stream = TwoLaplaceStream((100_000,), b, device="cuda", generator=gen)
    x = _draws(stream, 2).cpu().numpy().ravel()
    assert stats.kstest(x, lambda t: two_laplace_cdf(t, b)).pvalue > 1e-3
    again = TwoLaplaceStream((100_000,), b, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))
    assert np.array_equal(_draws(again, 2).cpu().numpy().ravel(), x)
