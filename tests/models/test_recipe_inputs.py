"""Recipes take PyG data as PyG loads it: the cleaning is 1-stable (brute force), unlabelled nodes
leave the masks with a warning, and no method needs an argument it does not use."""
import itertools
import math

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from pyg_private import PrivacyAccountant
from pyg_private.models import (CaribouConfig, GCONConfig, LPGNetConfig, ProGAPConfig, run_caribou, run_gcon,
                                run_lpgnet, run_progap)
from pyg_private.models.gcon import calibrate_scores
from pyg_private.models.recipe_inputs import UnlabelledNodesWarning, clean_graph, prepare_node_data


def _pairs(ei: torch.Tensor) -> set:
    return {(int(a), int(b)) for a, b in ei.t() if a < b}


def _random_multigraph(g: torch.Generator, n: int) -> torch.Tensor:
    """Entries with self-loops, duplicates and one direction only, as raw data lists them."""
    m = int(torch.randint(0, 12, (1,), generator=g))
    return torch.randint(n, (2, m), generator=g)


def test_cleaning_is_one_stable_for_an_edge_and_a_node():
    """Brute force over random multigraphs on 5 nodes: removing every entry between one pair
    changes at most that undirected edge of the cleaned graph; removing one node changes only the
    edges at that node. (That is what carries a guarantee on the clean graph back to the input.)"""
    g = torch.Generator().manual_seed(0)
    n = 5
    for _ in range(300):
        ei = _random_multigraph(g, n)
        clean = _pairs(clean_graph(ei, n))
        assert all(a != b for a, b in clean)
        for u, v in itertools.combinations_with_replacement(range(n), 2):
            keep = ~(((ei[0] == u) & (ei[1] == v)) | ((ei[0] == v) & (ei[1] == u)))
            other = _pairs(clean_graph(ei[:, keep], n))
            assert clean ^ other <= {(min(u, v), max(u, v))} - ({(u, u)} if u == v else set())
        for w in range(n):
            keep = (ei[0] != w) & (ei[1] != w)
            other = _pairs(clean_graph(ei[:, keep], n))
            assert all(w in pair for pair in clean ^ other)


def test_clean_graph_is_pyg_simple_undirected():
    ei = torch.tensor([[0, 0, 1, 2, 2, 3], [0, 1, 0, 3, 3, 3]])  # a loop, both directions, a duplicate, one direction
    out = clean_graph(ei, 4)
    assert out.tolist() == [[0, 1, 2, 3], [1, 0, 3, 2]]


def _graph(n: int = 60, c: int = 3, seed: int = 0) -> Data:
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % c
    x = torch.nn.functional.one_hot(y, c).float() + 0.5 * torch.randn(n, c, generator=g)
    src, dst = torch.randint(n, (300,), generator=g), torch.randint(n, (300,), generator=g)
    keep = (y[src] == y[dst]) & (src != dst)
    ei = to_undirected(torch.stack([src[keep], dst[keep]]), num_nodes=n)
    perm = torch.randperm(n, generator=g)
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    for mask, idx in zip(masks, (perm[:30], perm[30:45], perm[45:])):
        mask[idx] = True
    return Data(x=x, edge_index=ei, y=y, train_mask=masks[0], val_mask=masks[1], test_mask=masks[2])


def _as_pyg_lists_it(data: Data) -> Data:
    """Self-loops on some nodes and every edge listed twice more, as raw files do."""
    out = data.clone()
    loops = torch.arange(0, data.num_nodes, 7).repeat(2, 1)
    out.edge_index = torch.cat([data.edge_index, data.edge_index, loops], dim=1)
    return out


def test_unlabelled_nodes_leave_the_masks_with_a_warning():
    data = _graph()
    data.y = data.y.clone()
    data.y[:10] = -1
    with pytest.warns(UnlabelledNodesWarning, match="unknown label"):
        out = prepare_node_data(data, recipe="run_x")
    for name in ("train_mask", "val_mask", "test_mask"):
        assert not bool((getattr(out, name) & (data.y < 0)).any())
        assert int(getattr(out, name).sum()) == int((getattr(data, name) & (data.y >= 0)).sum())
    assert int((data.train_mask & (data.y < 0)).sum()) > 0  # the caller's data is unchanged
    data.val_mask = data.y < 0
    with pytest.raises(ValueError, match="val_mask.*no labelled node"):
        prepare_node_data(data, recipe="run_x")


def _call(recipe, data, config=None, **kw):
    if config is not None:
        run = {"gcon": run_gcon, "progap": run_progap, "lpgnet": run_lpgnet}[recipe]
        return run(data, config, epsilon=4.0, delta=1e-3, seed=0, **kw)
    if recipe == "progap":
        return run_progap(data, ProGAPConfig(K=1, epochs=5), epsilon=4.0, delta=1e-3, seed=0, **kw)
    if recipe == "lpgnet":
        return run_lpgnet(data, LPGNetConfig(epochs=5), epsilon=4.0, delta=1e-3, seed=0, **kw)
    if recipe == "gcon":
        return run_gcon(data, GCONConfig(epochs=5, encoder_dim=8), epsilon=4.0, delta=1e-3, seed=0, **kw)
    # no min_degree: GAP never uses it, CARIBOU declares 0, a bound every graph satisfies
    return run_caribou(data, CaribouConfig(method=recipe, K=1, epochs=5), epsilon=4.0, delta=1e-3, seed=0, **kw)


@pytest.mark.parametrize("recipe", ["progap", "lpgnet", "gap", "caribou", "gcon"])
def test_every_recipe_takes_the_graph_as_pyg_loads_it(recipe):
    data = _as_pyg_lists_it(_graph())
    data.y = data.y.clone()
    data.y[::9] = -1  # unlabelled nodes (LINKX, Facebook100) in every mask

    def call(**kw):
        return _call(recipe, data, **kw)

    with pytest.raises(ValueError, match="self-loop"):
        with pytest.warns(UnlabelledNodesWarning):
            call()
    with pytest.warns(UnlabelledNodesWarning):
        result = call(clean_graph=True)
    assert 0.0 <= result.test_accuracy <= 1.0 and len(result.accountant.events) >= 1


@pytest.mark.parametrize("context", [torch.inference_mode, torch.no_grad])
@pytest.mark.parametrize("recipe", ["progap", "lpgnet", "gap", "gcon"])
def test_every_recipe_trains_under_inference_mode_with_int32_labels_and_double_features(recipe, context):
    """Evaluation loops (and Lightning's predict) run under ``torch.inference_mode()``; PyG datasets may
    store int32 labels and float64 features. The recipe still trains, charges its releases, and
    gives the same result as a plain call."""
    plain = _call(recipe, _graph())
    with context():
        data = _graph()  # inference tensors (under inference mode), as a loader inside the loop makes them
        data.y, data.x = data.y.int(), data.x.double()
        result = _call(recipe, data)
    assert result.test_accuracy == pytest.approx(plain.test_accuracy)
    assert len(result.accountant.events) == len(plain.accountant.events) >= 1


@pytest.mark.parametrize("recipe", ["progap", "lpgnet", "gcon-released"])
def test_a_persistent_ledger_with_a_budget_is_charged_once(recipe, tmp_path):
    """The recipes check their whole plan against the budget first, on a scratch copy: a persistent
    ledger (whose deep copy reopens its file) must hold the run's events once, not the plan as well."""
    from pyg_private.accounting.persistent_ledger import PersistentPrivacyAccountant

    plain = PrivacyAccountant()
    kw = {} if recipe != "gcon-released" else {"config": GCONConfig(epochs=5, encoder_dim=8, inference="released")}
    name = "gcon" if recipe == "gcon-released" else recipe
    _call(name, _graph(), accountant=plain, **kw)
    ledger = PersistentPrivacyAccountant(tmp_path / "ledger.db", budget={"edge": (20.0, 1e-3)})
    _call(name, _graph(), accountant=ledger, **kw)
    assert len(ledger.events) == len(plain.events) >= 1
    assert ledger.epsilon("edge", 1e-3) == pytest.approx(plain.epsilon("edge", 1e-3))


def test_calibration_undoes_the_class_size_weighting():
    """The strongly regularised head scores class j about n_j * <z, mu_j> (see run_gcon's notes):
    the majority class wins everywhere; the per-class scale and offset restore the centroid rule."""
    g = torch.Generator().manual_seed(0)
    sizes = torch.tensor([700, 200, 100])
    y = torch.repeat_interleave(torch.arange(3), sizes)
    means = torch.nn.functional.normalize(torch.randn(3, 8, generator=g) + 2.0, dim=1)  # a shared component
    z = torch.nn.functional.normalize(means[y] + 0.3 * torch.randn(len(y), 8, generator=g), dim=1)
    scores = (z @ means.t()) * sizes.float()  # the first-order solution's weighting
    raw = float((scores.argmax(-1) == y).float().mean())
    a, b = calibrate_scores(scores, y, 3)
    fixed = float(((scores.double() * a + b).argmax(-1) == y).float().mean())
    centroid = float(((z @ means.t()).argmax(-1) == y).float().mean())
    assert raw <= 0.75 and fixed >= centroid - 0.02


def test_gcon_keeps_the_encoder_when_it_validates_better():
    data = _graph()
    r = run_gcon(data, GCONConfig(epochs=20, encoder_dim=8), epsilon=1.0, delta=1e-3, seed=0)
    assert r.candidate in ("private", "edge-free")
    plain = run_gcon(data, GCONConfig(epochs=20, encoder_dim=8, edge_free_candidate=False), epsilon=1.0,
                     delta=1e-3, seed=0)
    assert plain.candidate == "private" and r.val_accuracy >= plain.val_accuracy
    assert len(r.accountant.events) == 1  # the candidate is free: still one event


def test_one_name_for_the_depth():
    assert ProGAPConfig(K=3).K == 3 and CaribouConfig(K=3).K == 3
    with pytest.raises(TypeError):
        ProGAPConfig(stages=3)  # the old name is gone, not silently ignored
    with pytest.raises(ValueError, match="checkpoint"):
        run_caribou(_graph(), CaribouConfig(method="mlp", checkpoint="best_val"), epsilon=math.inf, delta=1e-3,
                    level="node", max_degree=60, num_nodes=60)


def test_node_level_mlp_needs_no_degree_bound():
    """DP-SGD on the features alone reads no edge: no max_degree to declare."""
    data = _graph()
    r = run_caribou(data, CaribouConfig(method="mlp", epochs=2), epsilon=8.0, delta=1e-3, level="node", seed=0)
    assert [e.unit.value for e in r.accountant.events] == ["node"] * len(r.accountant.events)
    assert len(r.accountant.events) >= 1 and r.accountant.epsilon("node", 1e-3) <= 8.0 + 1e-6


def test_the_warning_gives_no_count_of_private_labels_at_node_level():
    data = _graph()
    data.y = data.y.clone()
    data.y[:10] = -1
    with pytest.warns(UnlabelledNodesWarning) as edge:
        prepare_node_data(data, recipe="run_x")
    with pytest.warns(UnlabelledNodesWarning) as node:
        prepare_node_data(data, recipe="run_x", level="node")
    assert "train_mask: 5" in str(edge[0].message) and "mask:" not in str(node[0].message)
