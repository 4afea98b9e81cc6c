"""The ``out=`` buffer of the local-DP feature transforms: the same release as a fresh output,
every entry overwritten, in place allowed, bad buffers refused before any charge."""
import pytest
import torch
from torch_geometric.data import Data

from pyg_private import PrivacyAccountant
from pyg_private.transforms import HDSFeaturePerturb, LaplaceFeaturePerturb


def _x(n=300, d=12, dtype=torch.float32):
    return torch.rand(n, d, generator=torch.Generator().manual_seed(3)).to(dtype)


def _hds(**kw):
    return HDSFeaturePerturb(2.0, 3, (0.0, 1.0), generator=torch.Generator().manual_seed(0),
                             accountant=PrivacyAccountant(), **kw)


@pytest.mark.parametrize("mask", [None, torch.arange(0, 300, 3)])
def test_out_equals_fresh_output_and_overwrites_everything(mask):
    x = _x()
    fresh = _hds(node_mask=mask)(Data(x=x))
    buf = torch.full_like(x, float("nan"))  # stale content must not survive
    got = _hds(node_mask=mask)(Data(x=x), out=buf)
    assert got.x is buf
    assert torch.equal(buf, fresh.x)
    assert torch.equal(got.ldp_mask, fresh.ldp_mask)


def test_in_place_equals_fresh_output():
    x = _x()
    fresh = _hds()(Data(x=x.clone()))
    y = x.clone()
    got = _hds()(Data(x=y), out=y)
    assert got.x is y and torch.equal(y, fresh.x)
    assert int((y != 0).sum(1).min()) == 3


def test_laplace_out_in_place_float64():
    x = _x(dtype=torch.float64)
    t = lambda: LaplaceFeaturePerturb(1.0, (0.0, 1.0), generator=torch.Generator().manual_seed(1),
                                         accountant=PrivacyAccountant())  # noqa: E731
    fresh = t()(Data(x=x.clone()))
    y = x.clone()
    t()(Data(x=y), out=y)
    assert torch.equal(y, fresh.x)


def test_reused_buffer_charges_every_release():
    acct = PrivacyAccountant()
    t = HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct, allow_recompose=True)
    x = _x()
    buf = torch.empty_like(x)
    a = t(Data(x=x), out=buf).x.clone()
    b = t(Data(x=x), out=buf).x
    assert len(acct.events) == 2 and not torch.equal(a, b)


@pytest.mark.parametrize("bad, match", [
    (lambda x: torch.empty(299, 12), "shape"),
    (lambda x: torch.empty(300, 12, dtype=torch.float64), "dtype"),
    (lambda x: torch.empty(300, 12).to_sparse(), "dense"),
    (lambda x: torch.empty(300, 12, requires_grad=True), "grad"),
    (lambda x: x.view(-1)[12:].view(-1)[:0], "shape"),
    (lambda x: "buffer", "tensor"),
])
def test_bad_buffers_refused_before_charge(bad, match):
    acct = PrivacyAccountant()
    x = _x()
    with pytest.raises((ValueError, TypeError), match=match):
        HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct)(Data(x=x), out=bad(x))
    assert len(acct.events) == 0


def test_partial_overlap_refused_before_charge():
    acct = PrivacyAccountant()
    base = torch.rand(301, 12)
    x, out = base[1:], base[:-1]
    with pytest.raises(ValueError, match="overlaps"):
        HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct)(Data(x=x), out=out)
    assert len(acct.events) == 0


def test_out_with_sparse_output_refused():
    acct = PrivacyAccountant()
    x = _x()
    with pytest.raises(ValueError, match="sparse_output"):
        HDSFeaturePerturb(1.0, 2, (0.0, 1.0), sparse_output=True, accountant=acct)(Data(x=x), out=torch.empty_like(x))
    assert len(acct.events) == 0
