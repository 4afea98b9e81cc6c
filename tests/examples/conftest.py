"""Fixtures of the example smoke tests: the offline data (or a skip), a shared cache for PyG's
processed files, a runner that executes an example's ``main()`` in-process, and two synthetic
graphs the examples have never seen: ``Odd`` (isolated nodes, all-zero feature rows) and ``Messy``
(the same graph as PyG may load one: self-loops, duplicate and one-directional entries, and
unknown labels ``y = -1``)."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import stochastic_blockmodel_graph, to_undirected

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: matplotlib is the optional ``plots`` extra: without it the examples print a notice instead of a PNG.
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def plotted(out: str, png: Path) -> bool:
    """Whether the example drew its figure: the PNG where matplotlib is installed, and where it is
    not (``pip install -e .[test]`` without ``plots``), the notice in ``out`` and no file."""
    if HAS_MATPLOTLIB:
        return png.is_file()
    return "matplotlib not installed: no PNG" in out and not png.exists()


def shared_data() -> Path | None:
    env = os.environ.get("PYG_PRIVATE_DATA", "")
    if env:
        return Path(env) if Path(env).is_dir() else None
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "data").is_dir():
            return parent / "shared" / "data"
    return None


@pytest.fixture(scope="session")
def _cache(tmp_path_factory) -> Path:
    """One cache for the whole session: PyG processes each raw dataset once."""
    return tmp_path_factory.mktemp("pyg_private_cache")


@pytest.fixture
def offline(_cache, monkeypatch):
    """A function ``(relative raw folder) -> None`` that skips the test unless the offline
    folder exists, and points the loaders at the data and the session cache."""
    data = shared_data()

    def need(raw: str) -> None:
        if data is None or not (data / raw).is_dir():
            pytest.skip(f"the offline files {raw} are absent (set PYG_PRIVATE_DATA)")
        monkeypatch.setenv("PYG_PRIVATE_DATA", str(data))
        monkeypatch.setenv("PYG_PRIVATE_CACHE", str(_cache))

    return need


@pytest.fixture
def run_example(monkeypatch, capsys, tmp_path):
    """``run_example(name, *argv) -> (stdout, stderr, out_dir)``: the example's ``main()`` run
    in-process with ``--out`` set to a fresh folder (the examples import their helpers from
    ``examples/``, which is put on ``sys.path``)."""
    monkeypatch.syspath_prepend(str(EXAMPLES))

    def run(name: str, *argv: str, out: bool = True) -> tuple[str, str, Path]:
        spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
        spec.loader.exec_module(module)
        out_dir = tmp_path / "out"
        monkeypatch.setattr(sys, "argv", [name, *argv, *(["--out", str(out_dir)] if out else [])])
        module.main()
        captured = capsys.readouterr()
        return captured.out, captured.err, out_dir

    return run


def odd_graph(seed: int = 0) -> Data:
    """90 nodes in 3 blocks (a stochastic block model), 24 binary features with one class-typed
    coordinate per node, 6 isolated nodes, and 6 all-zero feature rows (two of them isolated)."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    blocks, per_block, features = 3, 30, 24
    n = blocks * per_block
    p = [[0.25 if i == j else 0.02 for j in range(blocks)] for i in range(blocks)]
    edge_index = stochastic_blockmodel_graph([per_block] * blocks, p)
    y = torch.arange(blocks).repeat_interleave(per_block)
    perm = torch.randperm(n, generator=g)
    isolated = perm[:6]
    keep = ~(torch.isin(edge_index[0], isolated) | torch.isin(edge_index[1], isolated))
    edge_index = to_undirected(edge_index[:, keep], num_nodes=n)
    x = (torch.rand(n, features, generator=g) < 0.1).float()
    typed = y * (features // blocks) + torch.randint(0, features // blocks, (n,), generator=g)
    x[torch.arange(n), typed] = 1.0
    x[perm[4:10]] = 0.0
    return Data(x=x, edge_index=edge_index, y=y, num_nodes=n)


@pytest.fixture
def odd(monkeypatch):
    """Registers :func:`odd_graph` as the dataset ``"Odd"`` of ``examples/example_data.py``."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import example_data

    monkeypatch.setitem(example_data.EXTRA, "Odd", odd_graph)
    graph = odd_graph()
    degree = torch.bincount(graph.edge_index[0], minlength=graph.num_nodes)
    assert int((degree == 0).sum()) == 6 and int((graph.x.sum(1) == 0).sum()) == 6  # what the tests rely on
    return "Odd"


def messy_graph(seed: int = 0) -> Data:
    """:func:`odd_graph` as PyG may load a graph: 5 self-loops, 10 duplicated entries, 8 edges listed in
    one direction only, and 12 nodes with an unknown label (``y = -1``, 4 per class)."""
    data = odd_graph(seed)
    g = torch.Generator().manual_seed(seed + 1)
    ei = data.edge_index
    forward = ei[:, ei[0] < ei[1]]
    one_way = forward[:, torch.randperm(forward.size(1), generator=g)[:8]]  # drop their reverse entries
    drop = torch.zeros(ei.size(1), dtype=torch.bool)
    for u, v in one_way.t().tolist():
        drop |= (ei[0] == v) & (ei[1] == u)
    ei = ei[:, ~drop]
    loops = torch.arange(5).repeat(2, 1) * 7
    dupes = ei[:, torch.randperm(ei.size(1), generator=g)[:10]]
    y = data.y.clone()
    for c in range(3):
        y[(y == c).nonzero().view(-1)[:4]] = -1
    return Data(x=data.x, edge_index=torch.cat([ei, loops, dupes], dim=1), y=y, num_nodes=data.num_nodes)


#: what the cleaning leaves of :func:`messy_graph` (its undirected simple edges): delta = 1/MESSY_EDGES
MESSY_EDGES = int(odd_graph().edge_index.size(1)) // 2


@pytest.fixture
def messy(monkeypatch):
    """Registers :func:`messy_graph` as the dataset ``"Messy"`` of ``examples/example_data.py``."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import example_data

    monkeypatch.setitem(example_data.EXTRA, "Messy", messy_graph)
    graph = messy_graph()
    assert int((graph.edge_index[0] == graph.edge_index[1]).sum()) == 5 and int((graph.y < 0).sum()) == 12
    return "Messy"
