"""Sphinx configuration of the pyg-private documentation.

Build: ``make docs`` (HTML, warnings are errors) and ``make doctest`` (runs the pages' code).
The API pages (``api/*.rst``) and the tutorial pages (``tutorials/generated/*.rst``) are written at
build time by the local extension ``_ext/pyg_private_docs.py``: the API pages from each
subpackage's ``__all__``, the tutorials from ``examples/*.py``.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
# the package of this checkout, not another copy installed in the environment
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(HERE, "_ext"))

import pyg_private  # noqa: E402

project = "pyg-private"
author = "The pyg-private authors"
copyright = "the pyg-private authors, MIT License"
release = pyg_private.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "sphinx.ext.doctest",
    "sphinx.ext.viewcode",
    "pyg_private_docs",
]

templates_path = ["_templates"]
exclude_patterns = ["_build"]
root_doc = "index"
language = "en"

html_theme = "furo"
html_title = f"pyg-private {release}"
html_static_path = []
html_show_sourcelink = False

# ---------------------------------------------------------------------------------------------
# autodoc / autosummary / napoleon: Google style, as in PyG
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_class_signature = "mixed"
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# ``Attributes:`` sections become :ivar: fields, not attribute directives, so that an attribute
# that autodoc also documents (dataclass fields, properties) is not described twice
napoleon_use_ivar = True
napoleon_use_rtype = False
# PyG's ``Shapes:`` section (layers document their input and output shapes there)
napoleon_custom_sections = ["Shapes"]
add_module_names = False
python_display_short_literal_types = True

# ---------------------------------------------------------------------------------------------
# intersphinx needs the network: off by default (CI reaches the package registries only), on with
# PYG_PRIVATE_DOCS_INTERSPHINX=1 (``make docs INTERSPHINX=1``). Each value may also name a local
# objects.inv through PYG_PRIVATE_DOCS_INVENTORY_<NAME> (e.g. PYG_PRIVATE_DOCS_INVENTORY_TORCH).
_INTERSPHINX = {
    "python": "https://docs.python.org/3",
    "torch": "https://pytorch.org/docs/stable",
    "torch_geometric": "https://pytorch-geometric.readthedocs.io/en/latest",
    "opacus": "https://opacus.ai/api",
    "numpy": "https://numpy.org/doc/stable",
    "scipy": "https://docs.scipy.org/doc/scipy",
}
intersphinx_mapping = {}
if os.environ.get("PYG_PRIVATE_DOCS_INTERSPHINX", "") not in ("", "0"):
    for _name, _url in _INTERSPHINX.items():
        _local = os.environ.get(f"PYG_PRIVATE_DOCS_INVENTORY_{_name.upper()}")
        intersphinx_mapping[_name] = (_url, _local)
intersphinx_timeout = 10

# ---------------------------------------------------------------------------------------------
# doctest: every page's blocks carry their own set-up; the data come from the offline folder
doctest_test_doctest_blocks = ""  # plain ``>>>`` blocks are not collected: pages use testcode
doctest_global_setup = """
import os
os.environ.setdefault("TQDM_DISABLE", "1")
"""

# ---------------------------------------------------------------------------------------------
# pages written at build time (see _ext/pyg_private_docs.py)
pyg_private_api_subpackages = [
    "accounting", "nn", "transforms", "models", "audit", "datasets", "metrics", "utils",
    "distributed", "mechanisms", "sampling",
]
pyg_private_examples_dir = os.path.join(ROOT, "examples")
