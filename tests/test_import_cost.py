"""Importing the package loads no heavy optional dependency (Opacus, dp-accounting, cryptography,
SciPy, Triton, mpmath) and no C extension until one is used, and every public name still resolves:
through ``getattr``, ``dir()``, ``from ... import *`` and pickling by qualified name. Each import
check runs in a fresh interpreter (this process has imported everything already)."""
from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("opacus", "dp_accounting", "cryptography", "triton", "mpmath")
PACKAGES = ("pyg_private", "pyg_private.accounting", "pyg_private.audit", "pyg_private.datasets",
            "pyg_private.distributed", "pyg_private.mechanisms", "pyg_private.metrics", "pyg_private.models",
            "pyg_private.nn", "pyg_private.sampling", "pyg_private.sampling.backends", "pyg_private.sampling.words",
            "pyg_private.transforms", "pyg_private.utils")
#: The lazily resolved names of pyg_private.accounting (their modules import Opacus).
OPACUS_NAMES = ("OpacusAccountant", "make_private", "make_private_with_epsilon", "dp_sgd_noise_multiplier",
                "ReleaseInsideDPSGDError", "check_opacus_model")


def _loaded(imports: str, names=HEAVY + ("scipy",)) -> tuple[list[str], list[str]]:
    """``(heavy modules, pyg_private C extensions)`` in ``sys.modules`` after ``imports`` in a fresh
    interpreter."""
    code = textwrap.dedent(imports) + textwrap.dedent(f"""
        import sys
        print(sorted(m for m in {names!r} if m in sys.modules))
        print(sorted(m for m in sys.modules if m.startswith("pyg_private.") and m.endswith("_native")
                     and m != "pyg_private._native"))
    """)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    heavy, native = done.stdout.strip().splitlines()[-2:]
    return eval(heavy), eval(native)  # two lists of module names printed above


def test_import_of_the_package_alone_loads_nothing_heavy():
    heavy, native = _loaded("import pyg_private, pyg_private.accounting", HEAVY + ("scipy", "torch_geometric"))
    assert heavy == [] and native == []


def test_import_of_the_main_subpackages_adds_nothing_heavy_to_torch_and_pyg():
    """The brief's command: ``import pyg_private, .nn, .transforms, .models, .accounting`` imports none of
    Opacus, dp-accounting, cryptography, Triton, mpmath, SciPy beyond what ``import torch,
    torch_geometric`` imports by itself (with torch >= 2.x and Triton installed, PyG's import of
    ``torch._dynamo`` loads Triton, and sympy loads mpmath: those are PyG's, not ours)."""
    baseline, _ = _loaded("import torch, torch_geometric")
    heavy, native = _loaded("import pyg_private, pyg_private.nn, pyg_private.transforms, pyg_private.models, "
                            "pyg_private.accounting")
    assert sorted(set(heavy) - set(baseline)) == []
    assert not {"opacus", "dp_accounting", "cryptography", "scipy"} & set(heavy)
    assert native == []


def test_a_charged_release_without_opacus_does_not_import_opacus():
    """The charge path looks for a model under Opacus' make_private only once Opacus is imported."""
    heavy, _ = _loaded("""
        import torch
        from pyg_private import PrivacyAccountant
        from pyg_private.nn import GAPAggregation
        acct = PrivacyAccountant()
        ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
        GAPAggregation(K=1, noise_multiplier=2.0, accountant=acct)(torch.randn(3, 4), ei)
        assert len(acct) == 1
    """, ("opacus",))
    assert heavy == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves(package):
    module = importlib.import_module(package)
    names = module.__all__
    assert len(set(names)) == len(names)
    listed = set(dir(module))
    for name in names:
        assert getattr(module, name) is not None, name
        assert name in listed, name
    namespace: dict = {}
    exec(f"from {package} import *", namespace)  # noqa: S102 - the star import users write
    assert set(names) <= set(namespace)


def test_lazy_opacus_names_are_the_real_objects_and_pickle():
    from opacus.validators.errors import UnsupportedModuleError

    import pyg_private.accounting as accounting
    from pyg_private.accounting import opacus_bridge, opacus_checks

    for name in OPACUS_NAMES:
        assert name in accounting.__all__ and name in dir(accounting)
        defined = opacus_checks if name in ("ReleaseInsideDPSGDError", "check_opacus_model") else opacus_bridge
        assert getattr(accounting, name) is getattr(defined, name), name
        assert pickle.loads(pickle.dumps(getattr(accounting, name))) is getattr(accounting, name), name
    assert issubclass(accounting.ReleaseInsideDPSGDError, UnsupportedModuleError)
    assert issubclass(accounting.ReleaseInsideDPSGDError, ValueError)
    with pytest.raises(AttributeError, match="no_such_name"):
        accounting.no_such_name  # noqa: B018


def test_lazy_native_attributes_resolve_and_can_be_patched(monkeypatch):
    from pyg_private.sampling.backends import native_c
    from pyg_private.utils import adjacency, csr_product

    for module, name in ((native_c, "_first_pass_native"), (native_c, "_grid_step_native"),
                         (adjacency, "_native_check"), (csr_product, "_native")):
        value = getattr(module, name)
        assert value is None or value.__name__.startswith("pyg_private.")
    monkeypatch.setattr(csr_product, "_native", None)
    assert not csr_product.csr_product_available()
    monkeypatch.undo()
    assert csr_product.csr_product_available() == (csr_product._native is not None
                                                    and bool(csr_product._native.available()))
