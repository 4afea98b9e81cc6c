"""deepcopy / pickle / torch.save of every transform, before and after a release: a deep copy
charges the same ledger, a pickle drops the generator, and the restored transform still releases."""
import copy
import io
import pickle

import pytest
import torch
import torch_geometric.transforms as PT
from torch_geometric.data import Data
from torch_geometric.utils import erdos_renyi_graph, to_undirected

import pyg_private.transforms as T
from pyg_private import PrivacyAccountant

MAKERS = {
    "EdgeRandomizedResponse": lambda acct, gen: T.EdgeRandomizedResponse(epsilon=1.0, accountant=acct, generator=gen),
    "HDSFeaturePerturb": lambda acct, gen: T.HDSFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct, generator=gen),
    "LaplaceFeaturePerturb": lambda acct, gen: T.LaplaceFeaturePerturb(1.0, (0.0, 1.0), accountant=acct, generator=gen),
    "PiecewiseFeaturePerturb": lambda acct, gen: T.PiecewiseFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct,
                                                                           generator=gen),
    "MultiBitFeaturePerturb": lambda acct, gen: T.MultiBitFeaturePerturb(1.0, 2, (0.0, 1.0), accountant=acct,
                                                                         generator=gen),
}


def _data():
    torch.manual_seed(0)
    return Data(x=torch.rand(20, 4), edge_index=to_undirected(erdos_renyi_graph(20, 0.2)))


@pytest.mark.parametrize("name", sorted(MAKERS))
@pytest.mark.parametrize("released", [False, True])
def test_copies_share_the_ledger_and_pickles_drop_the_generator(name, released):
    acct = PrivacyAccountant()
    t = MAKERS[name](acct, torch.Generator().manual_seed(1))
    if released:
        t(_data())
    n = len(acct)
    pipeline = copy.deepcopy(PT.Compose([T.L2RowNormalize(), t]) if name == "EdgeRandomizedResponse" else t)
    copied = pipeline.transforms[1] if isinstance(pipeline, PT.Compose) else pipeline
    assert copied.accountant is acct and copied.generator is t.generator
    copied(_data())
    assert len(acct) == n + 1  # charged to the one ledger
    restored = pickle.loads(pickle.dumps(t))
    assert restored.generator is None and t.generator is not None
    assert restored.accountant is not acct and len(restored.accountant) == len(acct)  # the ledger travels as a copy
    restored(_data())
    assert len(restored.accountant) == len(acct) + 1
    buf = io.BytesIO()
    torch.save(t, buf)
    buf.seek(0)
    assert torch.load(buf, weights_only=False).generator is None
    assert repr(restored) == repr(t)
