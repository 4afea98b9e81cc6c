"""PyG conventions around a paid release: ``torch_geometric.nn.inits.reset(model)`` (what PyG's benchmark
loops call between runs) and ``reset_parameters()`` keep it, ``forget_release()`` drops it; a dtype or
device change of the same release (``model.double()``, ``model.half()``, ``model.to(device)`` with the
same inputs) reuses it, never a second charge; and a checkpoint carries the ledger with the release, so
a resumed run continues the same ledger."""
import io
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import MLP
from torch_geometric.nn.inits import reset

from pyg_private import PrivacyAccountant
from pyg_private.accounting import PrivacyBudgetExceeded, UntrackedPrivacyWarning
from pyg_private.nn import (ContractiveGraphLayer, DPPushFlowCap, EdgeFlippingPPR, GAPAggregation, NoisyPPRDiffusion,
                            PerturbedAPPRConv, PrecomputedPropagation, ProGAPAggregation)

N = 10
SRC = torch.arange(N)
RING = torch.cat([torch.stack([SRC, (SRC + 1) % N]), torch.stack([(SRC + 1) % N, SRC])], dim=1)
X = F.normalize(torch.rand(N, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
X_OTHER = F.normalize(torch.rand(N, 3, generator=torch.Generator().manual_seed(1)), dim=-1)
SIGNALS = torch.rand(N, 2, generator=torch.Generator().manual_seed(2))


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrackedPrivacyWarning)
        yield


def _features(layer, x):
    return layer(x, RING)


def _seeds(layer, x):
    return layer(edge_index=RING, seed_index=torch.tensor([0, 3]), num_nodes=N)


def _signals(layer, x):
    return layer(x, RING)


LAYERS = {  # name -> (make(accountant), call(layer, x), the input x)
    "cgl_edge": (lambda a: ContractiveGraphLayer(2, 0.9, min_degree=1, epsilon=1.0, delta=1e-5, accountant=a),
                 _features, X),
    "cgl_node": (lambda a: ContractiveGraphLayer(2, 0.9, level="node", min_degree=0, max_degree=3, num_nodes=N,
                                                 noise_multiplier=2.0, accountant=a), _features, X),
    "gap": (lambda a: GAPAggregation(2, epsilon=1.0, delta=1e-5, accountant=a), _features, X),
    "progap_edge": (lambda a: ProGAPAggregation(epsilon=1.0, delta=1e-5, accountant=a), _features, X),
    "progap_node": (lambda a: ProGAPAggregation(level="node", max_degree=3, noise_multiplier=2.0, accountant=a),
                    _features, X),
    "noisy_ppr_signals": (lambda a: NoisyPPRDiffusion(0.2, 5, 1e-2, noise_scale=1e-3, accountant=a), _signals,
                          SIGNALS),
    "noisy_ppr_seeds": (lambda a: NoisyPPRDiffusion(0.2, 5, 1e-2, noise_scale=1e-3, accountant=a), _seeds, None),
    "push_flow": (lambda a: DPPushFlowCap(alpha=0.2, num_iterations=5, eta=1e-2, noise_scale=1e-3, accountant=a),
                  _seeds, None),
    "edge_flipping": (lambda a: EdgeFlippingPPR(0.2, 5, epsilon=1.0, accountant=a), _seeds, None),
}
FEATURE_LAYERS = [k for k, v in LAYERS.items() if v[2] is not None]


class UserModel(nn.Module):
    """A user's model without reset_parameters of its own: PyG's reset() recurses into its children."""

    def __init__(self, layer, width):
        super().__init__()
        self.layer, self.lin = layer, nn.Linear(width, 2)

    def forward(self, x):
        return self.lin(self.layer(x, RING))


# ----------------------------------------------------------------------------- reset
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_pyg_reset_keeps_the_release_and_forget_release_drops_it(name):
    make, call, x = LAYERS[name]
    acct = PrivacyAccountant()
    layer = make(acct)
    out = call(layer, x)
    reset(layer)  # torch_geometric.nn.inits.reset: layer.reset_parameters()
    assert torch.equal(call(layer, x), out) and len(acct) == 1
    layer.reset_parameters()
    assert torch.equal(call(layer, x), out) and len(acct) == 1
    layer.forget_release()
    call(layer, x)
    assert len(acct) == 2


def test_reset_of_a_user_model_reinitialises_its_weights_and_keeps_the_release():
    acct = PrivacyAccountant()
    model = UserModel(GAPAggregation(1, epsilon=1.0, delta=1e-5, accountant=acct), 6)
    model(X)
    before = model.lin.weight.detach().clone()
    reset(model)  # what PyG's benchmark loops call between runs
    assert not torch.equal(model.lin.weight, before)
    model(X)
    assert len(acct) == 1


def test_gcon_reset_keeps_the_released_head_forget_release_drops_it():
    acct = PrivacyAccountant()
    conv = PerturbedAPPRConv(3, 2, alpha=0.4, epsilon=1.0, delta=1e-3, accountant=acct)
    conv.fit(X, RING, torch.arange(N) % 2)
    scores = conv(X, RING)
    reset(conv)
    assert torch.equal(conv(X, RING), scores) and len(acct) == 1
    conv.forget_release()
    with pytest.raises(RuntimeError, match="fit"):
        conv(X, RING)


# ----------------------------------------------------------------------------- dtype and device
@pytest.mark.parametrize("name", FEATURE_LAYERS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_a_dtype_change_of_the_same_release_is_post_processing(name, dtype):
    make, call, x = LAYERS[name]
    acct = PrivacyAccountant()
    layer = make(acct)
    out = call(layer, x)
    layer.to(dtype)  # model.double() / model.half()
    cast = call(layer, x.to(dtype))
    assert len(acct) == 1 and cast.dtype == dtype  # before: a second, charged release (1.000 -> 1.465)
    # the stored release cast (GAP's X^(0) = normalize(x) is recomputed from the input in its dtype)
    tol = 4 * max(torch.finfo(dtype).eps, torch.finfo(out.dtype).eps)
    assert torch.allclose(cast.double(), out.double(), rtol=tol, atol=tol)  # one rounding of the coarser dtype
    layer.float()
    assert torch.equal(call(layer, x), out) and len(acct) == 1
    call(layer, X_OTHER.to(dtype) if x is X else (SIGNALS + 1).to(dtype))  # other values: a new release
    assert len(acct) == 2


def test_a_dtype_change_under_a_budget_raises_nothing():
    acct = PrivacyAccountant(budget={"edge": (1.0, 1e-5)})
    layer = ContractiveGraphLayer(2, 0.9, min_degree=1, epsilon=1.0, delta=1e-5, accountant=acct)
    layer(X, RING)
    layer.double()
    layer(X.double(), RING)  # before: PrivacyBudgetExceeded
    layer.half()
    layer(X.half(), RING)
    assert len(acct) == 1 and acct.epsilon("edge", 1e-5) <= 1.0
    with pytest.raises(PrivacyBudgetExceeded):
        layer(X_OTHER, RING)


def test_precomputed_propagation_model_double_and_half_reuse_the_release():
    acct = PrivacyAccountant()
    model = PrecomputedPropagation(ContractiveGraphLayer(2, 0.9, min_degree=1, epsilon=1.0, delta=1e-5,
                                                         accountant=acct), MLP([6, 8, 2], norm=None))
    z = model.released(X, RING)
    assert model.double()(X.double(), RING).dtype == torch.float64
    assert torch.equal(model.released(X.double(), RING), z.double())
    assert model.half().released(X.half(), RING).dtype == torch.float16
    assert len(acct) == 1


def test_a_loaded_release_serves_an_upcast_input_without_a_charge():
    layer = GAPAggregation(2, epsilon=1.0, delta=1e-5, accountant=PrivacyAccountant())
    out = layer(X, RING)
    buf = io.BytesIO()
    torch.save(layer.state_dict(), buf)
    buf.seek(0)
    acct = PrivacyAccountant()
    fresh = GAPAggregation(2, epsilon=1.0, delta=1e-5, accountant=acct)
    fresh.load_state_dict(torch.load(buf))
    fresh.double()
    assert torch.equal(fresh(X.double(), RING)[:, 3:], out[:, 3:].double()) and len(acct) == 0  # the noisy hops
    assert torch.equal(fresh(X, RING), out) and len(acct) == 0  # bound now, in either dtype


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_device_change_of_the_same_release_is_post_processing():
    acct = PrivacyAccountant()
    layer = GAPAggregation(2, epsilon=1.0, delta=1e-5, accountant=acct)
    out = layer(X, RING)
    layer.cuda()
    moved = layer(X.cuda(), RING.cuda())
    assert moved.device.type == "cuda" and torch.equal(moved.cpu(), out) and len(acct) == 1


# ----------------------------------------------------------------------------- checkpoints
def _checkpointed_model(acct):
    from pyg_private.models import AccountantCheckpoint

    class Model(AccountantCheckpoint, nn.Module):  # a LightningModule in a real run
        def __init__(self):
            super().__init__()
            self.net = PrecomputedPropagation(
                ContractiveGraphLayer(2, 0.9, min_degree=1, epsilon=1.0, delta=1e-5, accountant=acct),
                MLP([6, 8, 2], norm=None))

        def forward(self, x, edge_index):
            return self.net(x, edge_index)

    return Model()


def _lightning_save(model):
    """What Lightning writes: the state dict, then the module's on_save_checkpoint hook."""
    checkpoint = {"state_dict": model.state_dict()}
    model.on_save_checkpoint(checkpoint)
    buf = io.BytesIO()
    torch.save(checkpoint, buf)
    buf.seek(0)
    return torch.load(buf)


def _lightning_resume(model, checkpoint):
    """What Lightning's restore does: the module's on_load_checkpoint hook, then load_state_dict."""
    model.on_load_checkpoint(checkpoint)
    model.load_state_dict(checkpoint["state_dict"])


def test_a_resumed_run_continues_the_ledger_of_its_checkpoint():
    acct = PrivacyAccountant(budget={"edge": (1.2, 1e-5)})
    model = _checkpointed_model(acct)
    out = model(X, RING)
    checkpoint = _lightning_save(model)
    resumed_acct = PrivacyAccountant(budget={"edge": (1.2, 1e-5)})
    resumed = _checkpointed_model(resumed_acct)
    _lightning_resume(resumed, checkpoint)
    assert len(resumed_acct) == 1 and resumed_acct.epsilon("edge", 1e-5) == pytest.approx(1.0)
    assert torch.equal(resumed(X, RING), out) and len(resumed_acct) == 1  # the release, free, on the same ledger
    with pytest.raises(PrivacyBudgetExceeded):  # the budget counts what the first run spent
        resumed(X_OTHER, RING)


def test_a_checkpoint_without_the_ledger_warns_and_a_used_accountant_is_not_overwritten():
    from pyg_private.models import accountant_checkpoint, restore_accountants

    acct = PrivacyAccountant()
    model = _checkpointed_model(acct)
    model(X, RING)
    plain = {"state_dict": model.state_dict()}  # saved without the hook
    with pytest.warns(UserWarning, match="no privacy ledger"):
        _lightning_resume(_checkpointed_model(PrivacyAccountant()), plain)
    busy = PrivacyAccountant()
    other = _checkpointed_model(busy)
    other(X_OTHER, RING)
    other(X, RING)
    with pytest.raises(ValueError, match="already records 2 release"):
        restore_accountants(other, accountant_checkpoint(model))
    assert len(busy) == 2
    restore_accountants(model, accountant_checkpoint(model))  # the same ledger: nothing to do
    assert len(acct) == 1


def test_the_plain_torch_pattern():
    from pyg_private.models import accountant_checkpoint, restore_accountants

    acct = PrivacyAccountant()
    model = _checkpointed_model(acct)
    out = model(X, RING)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "privacy": accountant_checkpoint(model)}, buf)
    buf.seek(0)
    state = torch.load(buf)
    acct2 = PrivacyAccountant()
    model2 = _checkpointed_model(acct2)
    model2.load_state_dict(state["model"])
    restore_accountants(model2, state["privacy"])
    assert torch.equal(model2(X, RING), out) and len(acct2) == 1


def test_with_lightning_if_installed(tmp_path):
    L = pytest.importorskip("lightning.pytorch", reason="lightning is not installed in this environment")
    from pyg_private.models import AccountantCheckpoint

    acct = PrivacyAccountant()

    class Module(AccountantCheckpoint, L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = PrecomputedPropagation(
                ContractiveGraphLayer(2, 0.9, min_degree=1, epsilon=1.0, delta=1e-5, accountant=acct),
                MLP([6, 8, 2], norm=None))

        def training_step(self, batch, idx):
            return F.cross_entropy(self.net(X, RING), torch.arange(N) % 2)

        def test_step(self, batch, idx):
            self.net(X, RING)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=0.01)

    loader = torch.utils.data.DataLoader([0], batch_size=1)
    module = Module()
    trainer = L.Trainer(max_epochs=1, default_root_dir=tmp_path, logger=False, enable_progress_bar=False)
    trainer.fit(module, loader)
    trainer.test(module, loader)  # inference_mode=True by default
    path = tmp_path / "run.ckpt"
    trainer.save_checkpoint(path)
    assert len(acct) == 1
    acct.__init__()  # a fresh process: an empty ledger in the same accountant object
    resumed = Module.load_from_checkpoint(path)
    assert len(acct) == 1
    del resumed
