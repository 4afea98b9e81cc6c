"""Laplace and Gaussian mechanisms: calibration, statistics, accounting, validation."""
import math
import warnings

import pytest
import torch

from pyg_private import PrivacyAccountant
from pyg_private.accounting import UntrackedPrivacyWarning, gdp_epsilon
from pyg_private.mechanisms import GaussianMechanism, LaplaceMechanism


def test_laplace_noise_has_the_declared_scale():
    gen = torch.Generator().manual_seed(1)
    mech = LaplaceMechanism(2.0, epsilon=0.5, generator=gen)  # scale 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        out = mech(torch.zeros(200_000))
    assert mech.scale == 4.0
    # Laplace(b): mean 0, E|X| = b, var 2 b^2; standard errors ~0.01, ~0.009, ~0.05
    assert abs(out.mean().item()) < 0.05
    assert out.abs().mean().item() == pytest.approx(4.0, abs=0.05)
    assert out.var().item() == pytest.approx(32.0, rel=0.02)


def test_gaussian_noise_and_exact_calibration():
    gen = torch.Generator().manual_seed(2)
    acct = PrivacyAccountant()
    mech = GaussianMechanism(math.sqrt(2.0), epsilon=1.0, delta=1e-5, accountant=acct, generator=gen)
    out = mech(torch.zeros(200_000, dtype=torch.float32))
    assert out.dtype == torch.float32
    assert out.std().item() == pytest.approx(mech.noise_std, rel=0.01)
    eps = acct.epsilon("edge", 1e-5)
    assert eps <= 1.0 and eps == pytest.approx(1.0, rel=1e-6)
    assert gdp_epsilon(mu=mech.mu, delta=1e-5) <= 1.0


def test_laplace_with_delta_calibrates_on_the_rdp_curve():
    acct = PrivacyAccountant()
    mech = LaplaceMechanism(1.0, epsilon=2.0, delta=1e-5, accountant=acct)
    mech(torch.zeros(3))
    assert mech.scale <= 0.5  # never more noise than the pure calibration
    assert acct.epsilon("edge", 1e-5) <= 2.0
    assert acct.epsilon("edge", 1e-5) == pytest.approx(2.0, rel=1e-6)


def test_every_call_is_charged():
    acct = PrivacyAccountant()
    mech = LaplaceMechanism(1.0, scale=10.0, accountant=acct)
    for _ in range(5):
        mech(torch.ones(2))
    assert len(acct) == 5
    # a fixed scale charges the rounded query: 2 coordinates on the grid 2^-17 add 2 * 2^-17 to Delta_1
    assert mech.granularity == 2.0 ** -17
    assert acct.pure_epsilon("edge") == pytest.approx(0.5 * (1 + 2.0 ** -16), rel=1e-12)
    assert acct.epsilon("edge", 1e-5) < 0.5  # RDP composition beats adding epsilons


def test_no_accountant_warns_once():
    mech = GaussianMechanism(1.0, noise_std=1.0)
    with pytest.warns(UntrackedPrivacyWarning, match="not tracked"):
        mech(torch.zeros(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mech(torch.zeros(1))


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda: LaplaceMechanism(1.0, epsilon=0.0), "epsilon"),
        (lambda: LaplaceMechanism(1.0, epsilon=1.0, delta=2.0), "delta"),
        (lambda: LaplaceMechanism(1.0, scale=-1.0), "scale"),
        (lambda: LaplaceMechanism(-1.0, scale=1.0), "sensitivity"),
        (lambda: LaplaceMechanism(1.0), "exactly one"),
        (lambda: GaussianMechanism(1.0, epsilon=1.0), "delta"),
        (lambda: GaussianMechanism(1.0, noise_std=0.0), "noise_std"),
        (lambda: GaussianMechanism(1.0, noise_std=1.0, unit="edges"), "unit"),
        (lambda: GaussianMechanism(1.0, noise_std=1.0, unit="local"), "local"),
    ],
)
def test_bad_arguments(make, argument):
    with pytest.raises(ValueError, match=argument):
        make()


def test_non_finite_query_releases_nothing():
    acct = PrivacyAccountant()
    with pytest.raises(ValueError, match="NaN"):
        LaplaceMechanism(1.0, scale=1.0, accountant=acct)(torch.tensor([float("nan")]))
    assert len(acct) == 0
