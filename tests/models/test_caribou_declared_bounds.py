"""The CARIBOU recipe checks the declared bounds before anything is trained or charged, and at
node level runs over a fixed node universe: absent nodes (zero rows without edges) are no
DP-SGD examples, the sampling rate comes from the public split, every output keeps its rows."""
import math

import pytest
import torch

from pyg_private import PrivacyAccountant
from pyg_private.datasets import load_chain
from pyg_private.models import CaribouConfig, fit_dp_sgd, run_caribou
from pyg_private.nn import ContractiveGraphLayer

FAST = dict(epochs=2, lr=1e-2)
NODE = dict(level="node", min_degree=0, max_degree=2, num_nodes=48)


@pytest.fixture(scope="module")
def chain():
    return load_chain("Chain-S", seed=0)  # 48 nodes on 6 paths: 12 nodes of degree one


def test_edge_level_min_degree_is_checked_before_anything(chain):
    acct = PrivacyAccountant()
    config = CaribouConfig("caribou", K=3, encoder_dim=4, hidden=8, edge_free_candidate=False, **FAST)
    with pytest.raises(ValueError, match=r"min_degree`=1.*minus one"):
        run_caribou(chain, config, epsilon=2.0, delta=1e-2, min_degree=1, accountant=acct, seed=0)
    assert len(acct) == 0
    # the degree floor makes min_degree=1 hold by construction: Eq. 6 at 1, one event
    result = run_caribou(chain, config, epsilon=2.0, delta=1e-2, min_degree=1, degree_floor=True, seed=0)
    assert len(result.accountant) == 1
    layer = ContractiveGraphLayer(3, 0.9, min_degree=1, degree_floor=True, epsilon=2.0, delta=1e-2)
    assert result.noise_std == pytest.approx(layer.noise_std)
    assert result.model.layer.degree_floor and result.model.layer.min_degree == 1


def test_node_level_needs_the_exact_universe_before_any_charge(chain):
    acct = PrivacyAccountant()
    config = CaribouConfig("caribou", K=2, encoder_dim=None, hidden=8, batch_size=8, **FAST)
    with pytest.raises(ValueError, match=r"universe of `num_nodes`=40"):
        run_caribou(chain, config, epsilon=4.0, delta=1e-3, accountant=acct, seed=0, **{**NODE, "num_nodes": 40})
    with pytest.raises(ValueError, match=r"max_degree`=1"):
        run_caribou(chain, config, epsilon=4.0, delta=1e-3, accountant=acct, seed=0, **{**NODE, "max_degree": 1})
    with pytest.raises(ValueError, match=r"min_degree`=1"):
        run_caribou(chain, config, epsilon=4.0, delta=1e-3, accountant=acct, seed=0, **{**NODE, "min_degree": 1})
    assert len(acct) == 0  # the encoder's and head's DP-SGD did not start


def _without(data, v):
    """``data`` with node v absent: a zero feature row and no edges, same universe and masks."""
    out = data.clone()
    out.x = data.x.clone()
    out.x[v] = 0.0
    out.edge_index = data.edge_index[:, (data.edge_index != v).all(0)]
    return out


def test_an_absent_node_is_no_example_and_every_release_keeps_its_rows(chain, monkeypatch):
    import pyg_private.models.caribou as recipe

    v = int(chain.train_mask.nonzero()[0])  # a training node
    seen = []
    original_fit, original_forward = recipe.fit_dp_sgd, ContractiveGraphLayer.forward

    def fit_spy(model, x, y, mask, **kwargs):
        seen.append(("fit", mask.clone(), kwargs["num_examples"]))
        return original_fit(model, x, y, mask, **kwargs)

    def forward_spy(self, x, edge_index, *args, **kwargs):
        seen.append(("layer", x.clone(), None))
        return original_forward(self, x, edge_index, *args, **kwargs)

    monkeypatch.setattr(recipe, "fit_dp_sgd", fit_spy)
    monkeypatch.setattr(ContractiveGraphLayer, "forward", forward_spy)
    config = CaribouConfig("caribou", K=2, encoder_dim=4, hidden=8, batch_size=8, **FAST)
    shapes = []
    for data, absent in ((chain, False), (_without(chain, v), True)):
        seen.clear()
        result = run_caribou(data, config, epsilon=8.0, delta=1e-3, seed=0, **NODE)
        fits = [s for s in seen if s[0] == "fit"]
        (layer_input,) = [s[1] for s in seen if s[0] == "layer"]
        assert len(fits) == 2  # encoder and head
        for _, mask, num_examples in fits:
            assert num_examples == int(chain.train_mask.sum())  # public: the split's size
            assert bool(mask[v]) is not absent  # the absent node is no example
        assert bool((layer_input[v] == 0).all()) is absent  # its embedding is a zero row
        logits = result.model.logits(data.x, data.edge_index)
        shapes.append((layer_input.shape, logits.shape))
        assert math.isfinite(result.test_accuracy)
    assert shapes[0] == shapes[1] and shapes[0][0][0] == 48


def test_fit_dp_sgd_samples_at_the_public_rate(chain):
    mask = chain.train_mask.clone()
    dropped = mask.nonzero()[:3, 0]
    mask[dropped] = False  # 5 present examples among the split's 8 slots
    acct = PrivacyAccountant()
    fit_dp_sgd(torch.nn.Linear(5, 2), chain.x, chain.y, mask, noise_multiplier=1.0, accountant=acct, epochs=2,
               batch_size=3, num_examples=8)
    assert len(acct) == 2 * 3 and all(e.params["sample_rate"] == 1 / 3 for e in acct.events)  # 1 / ceil(8 / 3)
    acct = PrivacyAccountant()
    fit_dp_sgd(torch.nn.Linear(5, 2), chain.x, chain.y, mask, noise_multiplier=1.0, accountant=acct, epochs=2,
               batch_size=3)  # without num_examples: the masked count (5), as before
    assert len(acct) == 2 * 2 and all(e.params["sample_rate"] == 1 / 2 for e in acct.events)
    with pytest.raises(ValueError, match="num_examples"):
        fit_dp_sgd(torch.nn.Linear(5, 2), chain.x, chain.y, mask, noise_multiplier=1.0, accountant=acct,
                   epochs=1, num_examples=4)


def test_num_classes_is_a_public_argument(chain):
    config = CaribouConfig("caribou", K=2, encoder_dim=None, hidden=8, batch_size=8, **FAST)
    acct = PrivacyAccountant()
    with pytest.raises(ValueError, match="num_classes"):
        run_caribou(chain, config, epsilon=2.0, delta=1e-2, accountant=acct, seed=0, num_classes=1, **NODE)
    assert len(acct) == 0
    result = run_caribou(chain, config, epsilon=math.inf, delta=1e-2, seed=0, num_classes=5, **NODE)
    assert result.model.logits(chain.x, chain.edge_index).shape == (48, 5)  # the width follows the argument


def test_absent_slots_may_carry_any_label(chain):
    # a node-level neighbour with a node absent must not fail where the graph with it present runs
    config = CaribouConfig("caribou", K=2, encoder_dim=None, hidden=8, batch_size=8, **FAST)
    absent = chain.clone()
    v = 5
    absent.x = absent.x.clone()
    absent.x[v] = 0.0
    absent.edge_index = absent.edge_index[:, (absent.edge_index != v).all(0)]
    absent.y = absent.y.clone()
    absent.y[v] = -1
    for d in (chain, absent):
        result = run_caribou(d, config, epsilon=2.0, delta=1e-2, seed=0, num_classes=int(chain.y.max()) + 1, **NODE)
        assert result.model.logits(d.x, d.edge_index).shape[0] == 48
