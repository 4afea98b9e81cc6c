"""``PYG_PRIVATE_NATIVE=0`` turns every C extension off, and the releases do not change: the same
seeded releases of the private layers, the same propagations, bit for bit, with and without the
extensions (each run in a fresh interpreter, since the switch is read at import)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from pyg_private._native import load_native, native_enabled

_SCRIPT = textwrap.dedent('''
    import sys, warnings, torch
    warnings.simplefilter("ignore")  # no accountant here: only the values are compared
    from torch_geometric.utils import erdos_renyi_graph, to_undirected
    from pyg_private.sampling.backends import native_c as C
    from pyg_private.utils import adjacency as A, appr_propagate, csr_product as P
    from pyg_private.nn import ContractiveGraphLayer, GAPAggregation, NoisyPPRDiffusion

    loaded = [m is not None for m in (C._first_pass_native, C._grid_step_native, A._native_check, P._native)]
    torch.manual_seed(0)
    n = 300
    ei = to_undirected(erdos_renyi_graph(n, 0.03), num_nodes=n)
    x = torch.randn(n, 24, dtype=torch.float64)
    gen = lambda: torch.Generator().manual_seed(7)  # reproducibility only: voids the guarantee
    out = {
        "cgl": ContractiveGraphLayer(K=4, contraction=0.9, min_degree=0, epsilon=2.0, delta=1e-3,
                                     generator=gen())(x.float(), ei),
        "gap": GAPAggregation(K=3, epsilon=2.0, delta=1e-3, generator=gen())(x, ei),
        "ppr": NoisyPPRDiffusion(alpha=0.2, num_iterations=20, epsilon=2.0, delta=1e-3,
                                 generator=gen())(edge_index=ei, seed_index=torch.arange(0, n, 29), num_nodes=n),
        "appr": appr_propagate(x, ei, alpha=0.15, steps=[3, float("inf")], r=0.5),
    }
    torch.save({"loaded": loaded, "out": out}, sys.argv[1])
''')


def _run(tmp_path, native: str) -> dict:
    path = tmp_path / f"native{native}.pt"
    env = {**os.environ, "PYG_PRIVATE_NATIVE": native, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(path)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(path)


def test_switch_is_read_from_the_environment(monkeypatch):
    for off in ("0", "off", "False", " no "):
        monkeypatch.setenv("PYG_PRIVATE_NATIVE", off)
        assert not native_enabled() and load_native("utils._csr_product_native") is None
    monkeypatch.setenv("PYG_PRIVATE_NATIVE", "1")
    assert native_enabled()
    monkeypatch.delenv("PYG_PRIVATE_NATIVE")
    assert native_enabled()
    assert load_native("utils._no_such_extension") is None


def test_releases_identical_with_and_without_the_extensions(tmp_path):
    with_c, without = _run(tmp_path, "1"), _run(tmp_path, "0")
    assert without["loaded"] == [False] * 4
    if not any(with_c["loaded"]):
        pytest.skip("no C extension is built here: both runs take the torch paths")
    for name, value in with_c["out"].items():
        other = without["out"][name]
        assert value.dtype == other.dtype and value.shape == other.shape, name
        assert torch.equal(value, other), name
