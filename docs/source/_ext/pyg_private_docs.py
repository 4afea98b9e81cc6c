"""Pages of the pyg-private documentation written at build time, and a check on the code blocks.

* **API pages** (``api/<subpackage>.rst``): one per subpackage, listing **every name of its**
  ``__all__`` in autosummary tables (classes, functions, exceptions and warnings, constants), so
  a name added to an ``__all__`` is documented without editing the docs. A name that another
  subpackage already documents (the same object re-exported, e.g. ``RandomSource`` in
  :mod:`pyg_private.mechanisms` and :mod:`pyg_private.sampling`) is listed with a link to its page
  instead of being described twice. A submodule listed in an ``__all__`` gets a page of its own.
* **Tutorial pages** (``tutorials/generated/<script>.rst``): one per ``examples/*.py`` script
  that is run from the command line (not the helper modules ``example_*.py``, ``*_common.py`` and
  ``link_anchors.py``): the script's module docstring rendered, how to run it with its ``--help``
  text, and the source (``literalinclude``). The ``--help`` texts are produced by one subprocess
  (``example_help.py``) and cached by the scripts' content under ``docs/build``.
* **Code-block check**: in the hand-written pages, a Python block either runs under
  ``sphinx.ext.doctest`` (``testcode`` / ``doctest``) or is a ``code-block:: python`` whose
  ``:caption:`` starts with ``Not run:`` and gives the reason; any other Python block is a warning
  (an error under ``-W``).
"""
from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import re
import subprocess
import sys

from sphinx.util import logging

logger = logging.getLogger(__name__)

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
ROOT = os.path.abspath(os.path.join(SOURCE, "..", ".."))

GENERATED_NOTE = ".. This file is written by docs/source/_ext/pyg_private_docs.py at build time; do not edit.\n\n"


def _write_if_changed(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _heading(text: str, char: str) -> str:
    return f"{text}\n{char * len(text)}\n\n"


# ------------------------------------------------------------------------------------------------
# API pages


def _kind(obj) -> str:
    if inspect.ismodule(obj):
        return "module"
    if inspect.isclass(obj):
        if issubclass(obj, Warning):
            return "warning"
        if issubclass(obj, BaseException):
            return "exception"
        return "class"
    if callable(obj):
        return "function"
    return "data"


_SECTIONS = [
    ("class", "Classes", "class.rst"),
    ("function", "Functions", None),
    ("exception", "Exceptions", "class.rst"),
    ("warning", "Warnings", "class.rst"),
]


def _owner(obj, subpackages: list[str]) -> str | None:
    """The subpackage whose name prefixes the module that defines ``obj`` (its canonical page)."""
    module = getattr(obj, "__module__", None) if not inspect.ismodule(obj) else obj.__name__
    if not isinstance(module, str):
        return None
    for sub in subpackages:
        full = f"pyg_private.{sub}"
        if module == full or module.startswith(full + "."):
            return sub
    return None


# id(obj) -> the public name it is documented under (filled by write_api_pages)
DOCUMENTED: dict[int, str] = {}


def write_api_pages(subpackages: list[str]) -> None:
    api_dir = os.path.join(SOURCE, "api")
    documented = DOCUMENTED  # id(obj) -> the full name of its page
    documented.clear()
    entries = {}
    # first pass: the canonical page of every object (its defining subpackage, else the first)
    for sub in subpackages:
        module = importlib.import_module(f"pyg_private.{sub}")
        names = list(module.__all__)
        entries[sub] = [(name, getattr(module, name)) for name in names]
    for sub in subpackages:
        for name, obj in entries[sub]:
            if _kind(obj) == "data":
                continue  # constants are values (often shared ints or strings): never aliases
            owner = _owner(obj, subpackages)
            if owner == sub:
                documented.setdefault(id(obj), f"pyg_private.{sub}.{name}")
    for sub in subpackages:
        for name, obj in entries[sub]:
            if _kind(obj) != "data":
                documented.setdefault(id(obj), f"pyg_private.{sub}.{name}")

    toc = []
    expected = set()  # the stub pages of this build (autosummary writes them after this function)
    for sub in subpackages:
        full = f"pyg_private.{sub}"
        text = GENERATED_NOTE + _heading(full, "=")
        text += f".. automodule:: {full}\n   :no-members:\n\n.. currentmodule:: {full}\n\n"
        by_kind: dict[str, list[str]] = {}
        aliases = []
        modules = []
        for name, obj in entries[sub]:
            kind = _kind(obj)
            if kind == "module":
                modules.append(name)
                continue
            canonical = documented.get(id(obj)) if kind != "data" else None
            if canonical is not None and canonical != f"{full}.{name}":
                aliases.append((name, canonical))
                continue
            by_kind.setdefault(kind, []).append(name)
        for kind, title, template in _SECTIONS:
            names = by_kind.get(kind)
            if not names:
                continue
            text += _heading(title, "-")
            text += ".. autosummary::\n   :toctree: generated\n   :nosignatures:\n"
            if template:
                text += f"   :template: {template}\n"
            text += "\n" + "".join(f"   {n}\n" for n in names) + "\n"
            expected.update(f"{full}.{n}.rst" for n in names)
        if by_kind.get("data"):
            # constants on the page itself: autosummary's one-line summary of a value would be the
            # docstring of its type (``tuple``, ``dict``); data_docstring below finds the comment
            text += _heading("Constants", "-")
            module = importlib.import_module(full)
            for name in by_kind["data"]:
                text += f".. autodata:: {name}\n"
                if len(repr(getattr(module, name))) > 80:
                    text += "   :no-value:\n"
                text += "\n"
        if modules:
            text += _heading("Modules", "-")
            text += "These submodules are part of the public interface as modules:\n\n"
            text += ".. toctree::\n   :maxdepth: 1\n\n"
            for name in modules:
                text += f"   generated/{full}.{name}\n"
                mod_full = f"{full}.{name}"
                expected.add(f"{mod_full}.rst")
                page = GENERATED_NOTE + _heading(mod_full, "=")
                page += f".. automodule:: {mod_full}\n   :members:\n"
                _write_if_changed(os.path.join(api_dir, "generated", f"{mod_full}.rst"), page)
            text += "\n"
        if aliases:
            text += _heading("Also exported here", "-")
            text += ("These names are documented on the page of the subpackage that defines them; "
                     f"``from {full} import NAME`` gives the same object.\n\n")
            text += ".. list-table::\n   :header-rows: 1\n\n   * - name\n     - documented as\n"
            for name, canonical in aliases:
                text += f"   * - ``{name}``\n     - :py:obj:`{canonical}`\n"
            text += "\n"
        _write_if_changed(os.path.join(api_dir, f"{sub}.rst"), text)
        toc.append(sub)
    generated = os.path.join(api_dir, "generated")
    for f in os.listdir(generated) if os.path.isdir(generated) else ():
        if f.endswith(".rst") and f not in expected:  # a name no longer public (or now a constant)
            os.remove(os.path.join(generated, f))
    index = GENERATED_NOTE + ".. toctree::\n   :maxdepth: 1\n\n" + "".join(f"   api/{s}\n" for s in toc)
    _write_if_changed(os.path.join(api_dir, "toc.rst.inc"), index)


# ------------------------------------------------------------------------------------------------
# tutorial pages

_HELPER = re.compile(r"^(example_.*|.*_common|link_anchors)\.py$")

# how the tutorials index groups the scripts; a script not named here goes under "More examples"
TUTORIAL_GROUPS = [
    ("First steps", ["demo", "pyg_gcn_to_private", "pyg_node_private_opacus"]),
    ("Node classification", ["cora_caribou", "chains_caribou", "caribou_oracle_bound", "progap_cora",
                             "cora_gcon", "cora_ml_gcon", "cora_privge", "cora_privge_random_features"]),
    ("Link prediction", ["link_prediction"]),
    ("Personalized PageRank", ["blogcatalog_ppr"]),
    ("Several processes", ["distributed_caribou"]),
    ("Auditing", ["audit_cora"]),
]

# the command line each page shows first (a script not named here: its plain command line)
TUTORIAL_COMMANDS = {
    "distributed_caribou": "torchrun --standalone --nproc_per_node 2 examples/distributed_caribou.py --quick",
}


_SET_SIZE = re.compile(r"(?<![\\\w`|])\|([A-Za-z][A-Za-z0-9_]*)\|(?![\w`|])")


def example_scripts(examples_dir: str) -> list[str]:
    return sorted(f[:-3] for f in os.listdir(examples_dir)
                  if f.endswith(".py") and not _HELPER.match(f))


def _module_docstring(path: str) -> str:
    import ast
    with open(path, encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read()))
    return doc or ""


def _help_texts(examples_dir: str, scripts: list[str]) -> dict[str, str]:
    digest = hashlib.sha256()
    for f in sorted(os.listdir(examples_dir)):
        if f.endswith(".py"):
            with open(os.path.join(examples_dir, f), "rb") as fh:
                digest.update(f.encode() + b"\0" + fh.read())
    key = digest.hexdigest()
    cache = os.path.join(ROOT, "docs", "build", ".example-help.json")
    try:
        with open(cache, encoding="utf-8") as f:
            stored = json.load(f)
        if stored.get("key") == key and set(stored["help"]) == set(scripts):
            return stored["help"]
    except (OSError, ValueError, KeyError):
        pass
    env = dict(os.environ, COLUMNS="100", TQDM_DISABLE="1", PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, os.path.join(HERE, "example_help.py"), examples_dir, *scripts],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"example_help.py failed:\n{proc.stderr[-4000:]}")
    result = json.loads(proc.stdout)
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    with open(cache, "w", encoding="utf-8") as f:
        json.dump({"key": key, "help": result}, f)
    return result


def _indent(text: str, prefix: str = "   ") -> str:
    return "".join(prefix + line if line.strip() else "\n" for line in text.splitlines(keepends=True))


def write_tutorial_pages(examples_dir: str) -> None:
    out_dir = os.path.join(SOURCE, "tutorials", "generated")
    scripts = example_scripts(examples_dir)
    helps = _help_texts(examples_dir, scripts)
    firsts = {}
    for name in scripts:
        path = os.path.join(examples_dir, f"{name}.py")
        doc = _module_docstring(path)
        first, _, rest = doc.partition("\n")
        firsts[name] = first.strip()
        help_text = helps.get(name, "")
        if not help_text.strip():
            logger.warning("examples/%s.py printed no --help text", name, type="pyg_private_docs")
        has_quick = "--quick" in help_text
        command = TUTORIAL_COMMANDS.get(name, f"python examples/{name}.py")
        text = GENERATED_NOTE + f".. _tutorial-{name}:\n\n" + _heading(f"{name}.py", "=")
        text += f"*{first.strip()}*\n\n"
        text += f"Source: ``examples/{name}.py``. Run from the root of the repository:\n\n"
        text += ".. code-block:: console\n\n"
        text += f"   $ {command}\n"
        if has_quick and "--quick" not in command:
            text += f"   $ {command} --quick     # a small grid, minutes at most\n"
        text += "\n"
        text += _heading("What it does", "-")
        text += rest.strip() + "\n\n"
        # the docstrings are written for the terminal too: |E| (a set's size) is text, not an
        # RST substitution reference
        for token in sorted(set(_SET_SIZE.findall(rest))):
            text += f".. |{token}| replace:: \\|{token}\\|\n"
        text += "\n"
        text += _heading("Command line", "-")
        text += ".. code-block:: text\n\n" + _indent(help_text.rstrip() + "\n") + "\n"
        text += _heading("Source", "-")
        rel = os.path.relpath(path, out_dir).replace(os.sep, "/")
        text += f".. literalinclude:: {rel}\n   :language: python\n   :linenos:\n"
        _write_if_changed(os.path.join(out_dir, f"{name}.rst"), text)
    # the grouped list and the toctree for tutorials/index.rst
    placed = set()
    toc = GENERATED_NOTE
    for title, names in TUTORIAL_GROUPS + [("More examples", [s for s in scripts])]:
        names = [n for n in names if n in scripts and n not in placed]
        if not names:
            continue
        placed.update(names)
        toc += _heading(title, "-")
        for n in names:
            toc += f"* :doc:`generated/{n}`: {firsts[n]}\n"
        toc += "\n.. toctree::\n   :hidden:\n\n" + "".join(f"   generated/{n}\n" for n in names) + "\n"
    _write_if_changed(os.path.join(out_dir, "toc.rst.inc"), toc)
    for f in os.listdir(out_dir):  # a removed script's page goes too
        if f.endswith(".rst") and f[:-4] not in scripts:
            os.remove(os.path.join(out_dir, f))


# ------------------------------------------------------------------------------------------------
# the code-block check

_PY_BLOCK = re.compile(r"^(\s*)\.\. (?:code-block|code|sourcecode)::\s*(python3?|py|pycon|ipython)\s*$")


def check_code_blocks(app, docname: str, source: list[str]) -> None:
    if docname.startswith(("api/", "tutorials/generated/")):
        return
    lines = source[0].splitlines()
    for i, line in enumerate(lines):
        m = _PY_BLOCK.match(line)
        if not m:
            continue
        indent = len(m.group(1))
        caption = None
        for opt in lines[i + 1:]:
            stripped = opt.strip()
            if not stripped.startswith(":") or len(opt) - len(opt.lstrip()) <= indent:
                break
            if stripped.startswith(":caption:"):
                caption = stripped[len(":caption:"):].strip()
        if not caption or not caption.startswith("Not run:") or len(caption) < len("Not run: x"):
            logger.warning("a Python code-block that is not run must say so and why "
                           "(:caption: Not run: REASON), or be a testcode block",
                           location=(docname, i + 1), type="pyg_private_docs")


def data_docstring(app, what, name, obj, options, lines) -> None:
    """A constant's docstring: its ``#:`` comment in the module that defines it, never its type's.

    autodoc looks for the comment in the module the name is documented under (the subpackage),
    and otherwise shows the docstring of the value's type (``dict``'s, ``str``'s): the comment is
    looked up in the subpackage's submodules instead.
    """
    if what != "data" or not name.startswith("pyg_private."):
        return
    type_doc = inspect.getdoc(type(obj)) or ""
    if lines and "\n".join(lines).strip() != type_doc.strip():
        return
    lines[:] = []
    package, _, attr = name.rpartition(".")
    from sphinx.pycode import ModuleAnalyzer
    for modname, module in sorted(sys.modules.items()):
        if not modname.startswith(package + ".") or getattr(module, attr, None) is not obj:
            continue
        try:
            docs = ModuleAnalyzer.for_module(modname).find_attr_docs()
        except Exception:  # noqa: BLE001 - a module without source: no comment to find
            continue
        if ("", attr) in docs:
            lines.extend(docs[("", attr)])
            return


_NAMES_ONLY = re.compile(r"^(\s+)(\*{0,2}[A-Za-z_]\w*,\s*)+$")
_NAMES_THEN_TEXT = re.compile(r"^\s+(\*{0,2}[A-Za-z_]\w*,\s*)*\*{0,2}[A-Za-z_]\w*\s*(\([^)]*\))?\s*:")


def join_wrapped_argument_names(app, what, name, obj, options, lines) -> None:
    """Join an ``Args:`` entry whose list of names is wrapped onto the next, indented line.

    ``a, b, c,`` followed by ``d, e: as in ...`` (as indented or more) is one entry for the names a to e; napoleon
    would read the first line as an entry with an empty last name. Runs before napoleon.
    """
    i = 0
    while i < len(lines) - 1:
        m = _NAMES_ONLY.match(lines[i])
        nxt = lines[i + 1]
        if m and nxt.strip() and len(nxt) - len(nxt.lstrip()) >= len(m.group(1)):
            joined = lines[i].rstrip() + " " + nxt.strip()
            if _NAMES_THEN_TEXT.match(joined):
                lines[i:i + 2] = [joined]
                continue
        i += 1


def _import_dotted(path: str):
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for name in parts[i:]:
                obj = getattr(obj, name)
        except AttributeError:
            return None
        return obj
    return None


def resolve_public_name(app, env, node, contnode):
    """Resolve a reference to a name by another path to the page of its public name.

    ``pyg_private.PrivacyAccountant`` (the top-level re-export) and
    ``pyg_private.nn.contractive_graph_layer.ContractiveGraphLayer`` (the defining module) lead to
    the page of ``pyg_private.accounting.PrivacyAccountant`` and
    ``pyg_private.nn.ContractiveGraphLayer``; members follow their class.
    """
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    if not target.startswith("pyg_private."):
        return None
    parts = target.split(".")
    for i in range(len(parts), 1, -1):
        obj = _import_dotted(".".join(parts[:i]))
        if obj is None or inspect.ismodule(obj):
            continue
        public = DOCUMENTED.get(id(obj))
        if public is None:
            continue
        canonical = ".".join([public, *parts[i:]])
        if canonical == target:
            return None
        domain = env.get_domain("py")
        return domain.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], canonical, node,
                                   contnode)
    return None


def generate(app, config) -> None:
    write_api_pages(list(config.pyg_private_api_subpackages))
    write_tutorial_pages(config.pyg_private_examples_dir)


def setup(app):
    app.add_config_value("pyg_private_api_subpackages", [], "env")
    app.add_config_value("pyg_private_examples_dir", os.path.join(ROOT, "examples"), "env")
    app.connect("config-inited", generate)
    app.connect("source-read", check_code_blocks)
    app.connect("autodoc-process-docstring", data_docstring)
    app.connect("autodoc-process-docstring", join_wrapped_argument_names, priority=400)
    app.connect("missing-reference", resolve_public_name)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
