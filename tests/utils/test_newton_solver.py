"""The damped Newton solver of the GCON head against SciPy's L-BFGS and the optimality condition."""
import numpy as np
import pytest
import scipy.optimize as so
import torch

from pyg_private.utils.newton_solver import solve_separable_ridge
from pyg_private.utils.separable_loss import SeparableLoss


def _problem(seed=0, n=120, d=6, c=3):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(n, d, generator=g, dtype=torch.float64)
    z = z / z.norm(dim=1, keepdim=True).clamp_min(1.0)
    y = torch.nn.functional.one_hot(torch.randint(c, (n,), generator=g), c).double()
    b = 5 * torch.randn(d, c, generator=g, dtype=torch.float64)
    return z, y, b


@pytest.mark.parametrize("name, width", [("soft_margin", None), ("pseudo_huber", 0.2), ("pseudo_huber", 0.5)])
def test_matches_a_reference_solve(name, width):
    z, y, b = _problem()
    n, d = z.shape
    c = y.size(1)
    loss = SeparableLoss(name, c, width)
    sol = solve_separable_ridge(z, y, loss, regularization=0.05, linear_term=b, tol=1e-12)
    assert sol.converged and sol.grad_norm <= 1e-12 and sol.iterations < 30

    def f(t):
        theta = torch.tensor(t).view(d, c)
        return float(loss.value(z @ theta, y).sum() / n + 0.025 * (theta * theta).sum() + (b * theta).sum() / n)

    def grad(t):
        theta = torch.tensor(t).view(d, c)
        return (z.T @ loss.first(z @ theta, y) / n + 0.05 * theta + b / n).flatten().numpy()

    ref = so.minimize(f, np.zeros(d * c), jac=grad, method="L-BFGS-B", options=dict(ftol=1e-15, gtol=1e-13, maxiter=5000))
    assert np.abs(sol.theta.flatten().numpy() - ref.x).max() < 1e-6
    assert f(sol.theta.flatten().numpy()) <= ref.fun + 1e-12
    # optimality (GCON Eq. 40): b_j = -sum_i z_i l'(z_i theta_j) - n lambda theta_j
    recovered = -(z.T @ loss.first(z @ sol.theta, y)) - n * 0.05 * sol.theta
    assert torch.allclose(recovered, b, atol=1e-9)


def test_derivatives_match_autograd():
    x = torch.linspace(-6, 6, 101, dtype=torch.float64, requires_grad=True)
    for name, width in (("soft_margin", None), ("pseudo_huber", 0.3)):
        loss = SeparableLoss(name, 4, width)
        for target in (0.0, 1.0):
            y = torch.full_like(x, target)
            (g,) = torch.autograd.grad(loss.value(x, y).sum(), x, create_graph=True)
            (h,) = torch.autograd.grad(g.sum(), x)
            assert torch.allclose(g, loss.first(x, y), atol=1e-12)
            assert torch.allclose(h, loss.second(x, y), atol=1e-12)


def test_bad_arguments():
    z, y, b = _problem()
    with pytest.raises(ValueError, match="regularization"):
        solve_separable_ridge(z, y, SeparableLoss("soft_margin", 3), regularization=0.0)
    with pytest.raises(ValueError, match="not covered"):
        SeparableLoss("cross_entropy", 3)
    with pytest.raises(ValueError, match="huber_delta"):
        SeparableLoss("pseudo_huber", 3)
