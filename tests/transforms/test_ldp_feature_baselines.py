"""LP / PM / MB transforms: unbiasedness and variances through the transform, k non-zeros,
events, shared bookkeeping with HDS."""
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from pyg_private import PrivacyAccountant
from pyg_private.accounting import laplace_rdp
from pyg_private.mechanisms.ldp_baselines import (
    laplace_ldp_variance,
    multibit_moments,
    multibit_scale,
    piecewise_moments,
    piecewise_params,
)
from pyg_private.transforms import (
    HDSFeaturePerturb,
    LaplaceFeaturePerturb,
    MultiBitFeaturePerturb,
    PiecewiseFeaturePerturb,
)

from moment_checks import mean_var_checks




def _fixed_rows(n, d, low=0.0, high=1.0):
    row = torch.linspace(low, high, d, dtype=torch.float64)
    return Data(x=row.expand(n, d).clone(), num_nodes=n), row


@pytest.mark.parametrize("cls,moments", [(PiecewiseFeaturePerturb, piecewise_moments),
                                         (MultiBitFeaturePerturb, multibit_moments)])
def test_sampled_baselines_are_unbiased_with_the_spec_variance(cls, moments):
    n, d, k, eps = 30_000, 8, 3, 2.0
    data, row = _fixed_rows(n, d)
    t = cls(eps, k, (0.0, 1.0), accountant=PrivacyAccountant(), generator=torch.Generator().manual_seed(1))
    released = t(data)
    out = released.x
    assert bool(((out != 0).sum(1) == k).all())
    z = 2 * row - 1  # the public range maps [0, 1] onto [-1, 1]; the output estimates z
    mean, var = moments(z, eps, k, d)
    for j in range(d):
        mean_var_checks(out[:, j], float(z[j]), float(var[j]))
    bound = (piecewise_params(eps / k).s * d / k if cls is PiecewiseFeaturePerturb
                           else multibit_scale(eps, k, d))
    # the safe samplers' largest output: the grid's (PM: within half a step of s), rounded onto the output grid
    lo, hi = released.ldp["output_range"]
    assert lo == -hi and hi == pytest.approx(bound, rel=1e-6)
    assert float(out.abs().max()) <= float(torch.tensor(hi, dtype=out.dtype))  # rounding to float32 is monotone
    assert out.abs().max() > 0


def test_laplace_is_unbiased_with_variance_8d2_over_eps2():
    n, d, eps = 20_000, 5, 10.0
    data, row = _fixed_rows(n, d, -2.0, 2.0)
    acct = PrivacyAccountant()
    out = LaplaceFeaturePerturb(eps, (-2.0, 2.0), accountant=acct, generator=torch.Generator().manual_seed(2))(data).x
    z = row / 2
    for j in range(d):
        mean_var_checks(out[:, j], float(z[j]), laplace_ldp_variance(eps, d))
    ev = acct.events[0]
    assert ev.mechanism == "laplace" and ev.params["sensitivity"] == 2 * d and ev.params["scale"] == 2 * d / eps
    np.testing.assert_allclose(ev.rdp, laplace_rdp(ev.orders, sensitivity=2 * d, scale=2 * d / eps))
    assert acct.pure_epsilon("local") == pytest.approx(eps)


def test_default_k_events_and_per_node_ledger():
    acct = PrivacyAccountant()
    n, d = 40, 30
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, d, generator=g)
    pm = PiecewiseFeaturePerturb(8.0, None, (0.0, 1.0), accountant=acct, node_mask=torch.arange(20))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out = pm(Data(x=x, num_nodes=n))
    assert out.ldp["k"] == 3 and bool(((out.x[:20] != 0).sum(1) == 3).all())  # floor(8 / 2.5)
    ev = acct.events[0]
    assert ev.mechanism == "piecewise" and ev.params["compositions"] == 3 and ev.nodes.tolist() == list(range(20))
    mb = MultiBitFeaturePerturb(6.6, None, (0.0, 1.0), accountant=acct, node_mask=torch.arange(10, 40),
                                sparse_output=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out2 = mb(Data(x=x, num_nodes=n))
    assert out2.ldp["k"] == 3 and out2.x.layout == torch.sparse_coo
    assert out2.ldp["mechanism"] == "multi-bit"
    expected = np.array([8.0] * 10 + [14.6] * 10 + [6.6] * 20)
    np.testing.assert_allclose(acct.node_epsilons(), expected)
    assert acct.pure_epsilon("local") == pytest.approx(14.6)


def test_marks_are_shared_across_mechanisms():
    acct = PrivacyAccountant()
    data = Data(x=torch.rand(10, 4), num_nodes=10)
    out = HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct)(data)
    for t in (LaplaceFeaturePerturb(1.0, accountant=acct, clamp=True),
              PiecewiseFeaturePerturb(1.0, 1, accountant=acct, clamp=True),
              MultiBitFeaturePerturb(1.0, 1, accountant=acct, clamp=True)):
        with pytest.raises(ValueError, match="already perturbed"):
            t(out)
    assert len(acct) == 1
    again = LaplaceFeaturePerturb(1.0, accountant=acct, clamp=True, allow_recompose=True)(out)
    assert again.ldp["mechanism"] == "laplace" and again.ldp["num_releases"] == 2
    assert acct.pure_epsilon("local") == pytest.approx(2.0)


def test_validation_and_repr():
    with pytest.raises(ValueError, match="exceeds"):
        PiecewiseFeaturePerturb(1.0, 5, accountant=PrivacyAccountant())(Data(x=torch.zeros(2, 3), num_nodes=2))
    with pytest.raises(ValueError, match="epsilon"):
        MultiBitFeaturePerturb(-1.0)
    with pytest.raises(TypeError):
        LaplaceFeaturePerturb(1.0, sparse_output=True)  # not an argument of LP
    assert repr(LaplaceFeaturePerturb(0.5, (0, 1))) == (
        "LaplaceFeaturePerturb(epsilon=0.5, feature_range=[0, 1], clamp=False, sampler='safe')")
    assert repr(PiecewiseFeaturePerturb(2.0, sampler="float")) == (
        "PiecewiseFeaturePerturb(epsilon=2, k=auto, feature_range=[-1, 1], clamp=False, sampler='float')")
    assert repr(MultiBitFeaturePerturb(2.0, 4, (0, 1), sparse_output=True)) == (
        "MultiBitFeaturePerturb(epsilon=2, k=4, feature_range=[0, 1], clamp=False, sparse_output=True, sampler='safe')")
