"""A GCON fit that the damped Newton solver could not finish: Cora, 20 per class / 500 / 1000 (split
seed 1), Lambda = 0.01, epsilon 2. Its Armijo search saw no decrease near the minimiser (the
objective's rounding hid it) and stalled at a gradient norm of 1.6e-9, above the certificate's
target of 1.0e-9: the fit was charged and nothing released, and `examples/cora_gcon.py` stopped.
The solver now accepts a step that lowers the gradient norm there."""
from __future__ import annotations

import warnings

from pyg_private.datasets import attach_split, load_cora, per_class_split
from pyg_private.models import GCONConfig, run_gcon
from pyg_private.models.gcon import encode


def test_lambda_001_fit_on_cora_is_certified(offline):
    offline("Planetoid/Cora/raw")
    base = load_cora()
    data = attach_split(base, per_class_split(base.y, 20, 500, 1000, seed=1))
    config = GCONConfig(alpha=0.4, steps=(2,), regularization=0.01, encoder_dim=64, loss="soft_margin",
                        pseudo_labels=False, alpha_inference=None, weight_decay=5e-4, dropout=0.0,
                        embedding="logits")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = run_gcon(data, config, epsilon=2.0, delta=1.0 / data.edge_index.size(1), seed=1,
                          encoded=encode(data, config, 1))
    assert 0.0 <= result.test_accuracy <= 1.0
