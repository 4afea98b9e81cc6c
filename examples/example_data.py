"""Dataset loading for the examples: every Planetoid and CitationFull graph, BlogCatalog, the
larger real graphs (Facebook Page-Page, Amazon Computers, Coauthor CS, Facebook100 Cornell) and
CARIBOU's chains, offline from :obj:`$PYG_PRIVATE_DATA` (or downloaded where there is a network).

Names (case-insensitive; see :data:`NAMES`):

* Planetoid (Yang et al. 2016, public split): ``Cora``, ``CiteSeer``, ``PubMed``
  (also ``Planetoid/Cora`` and so on);
* CitationFull (Bojchevski & Günnemann 2018, no split): ``Cora_ML`` (or ``Cora-ML``), ``DBLP``,
  and ``CitationFull/Cora``, ``CitationFull/CiteSeer``, ``CitationFull/PubMed`` (the larger
  graphs of the same names);
* ``BlogCatalog`` (ASU release, no features, multi-label groups; :mod:`pyg_private.datasets`);
* ``Facebook`` (Facebook Page-Page, MUSAE release, Rozemberczki et al. 2021; PyG's
  :class:`~torch_geometric.datasets.FacebookPagePage`; the offline copy has the 4,714 binary
  description features, PyG's download a 128-column reduction; 179 self-loops);
* ``Computers`` (Amazon Computers) and ``CS`` (Coauthor CS), Shchur et al. 2018 (PyG's
  :class:`~torch_geometric.datasets.Amazon` and :class:`~torch_geometric.datasets.Coauthor`;
  also ``Amazon/Computers``, ``Coauthor/CS``);
* ``Cornell`` (Facebook100 Cornell, Traud et al. 2012, as distributed by LINKX, Lim et al. 2021;
  PyG's :class:`~torch_geometric.datasets.LINKXDataset` ``"cornell5"``: label gender) and
  ``Cornell-year`` (the same graph with GAP's class-year task:
  :func:`pyg_private.datasets.load_facebook100`). In both, ``y = -1`` marks an unknown label:
  such nodes belong to no split;
* ``Chain-S``, ``Chain-M``, ``Chain-L``, ``Chain-X`` (CARIBOU's synthetic chains, generated
  per seed with their own split).

No graph is cleaned here (self-loops, isolated nodes and unlabelled nodes are kept as the PyG
class returns them).

A dataset that is neither in :obj:`$PYG_PRIVATE_DATA` nor already in the cache raises
:class:`DatasetUnavailable`, whose message names the files to download and where to put them;
:func:`load_or_exit` turns it into a one-line error and exit status 2 (no traceback).

**Bounds on a graph the script has never seen.** Nothing here reads a privacy bound off a
graph. The examples declare bounds by public rules that hold for *every* graph: the edge-level
minimum degree of :class:`~pyg_private.nn.ContractiveGraphLayer` is ``min_degree=0`` (valid
with isolated nodes and degree-1 nodes), or ``D`` with the degree floor (normalisation by
``max(deg, D)``, which makes ``D`` hold by construction); feature ranges are enforced by
clipping or clamping, never measured.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from torch_geometric.data import Data

from pyg_private.datasets import (CHAIN_PRESETS, cache_dir, data_dir, load_blogcatalog, load_chain,
                                  load_facebook100, resolve_root)

__all__ = ["NAMES", "DatasetSpec", "DatasetUnavailable", "spec", "load_dataset", "load_or_exit",
           "add_dataset_argument", "check_node_classification", "file_stem", "EXTRA"]

_PLANETOID_URL = "https://github.com/kimiyoung/planetoid/raw/master/data"
_CITATION_FULL_URL = "https://github.com/abojchevski/graph2gauss/raw/master/data"
_PLANETOID_EXT = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
_FACEBOOK_PAGE_URL = "https://graphmining.ai/datasets/ptg/facebook.npz"
_MUSAE_URL = "https://snap.stanford.edu/data/facebook-large-page-page-network.html"
_SHCHUR_URL = "https://github.com/shchur/gnn-benchmark/raw/master/data/npz"
_LINKX_URL = "https://github.com/CUAI/Non-Homophily-Large-Scale/raw/master/data/facebook100"

#: Extra loaders by name, ``seed -> Data`` (the tests register synthetic graphs here).
EXTRA: dict[str, Callable[[int], Data]] = {}


@dataclass(frozen=True)
class DatasetSpec:
    """Where a named dataset comes from."""

    collection: str  # "Planetoid", "CitationFull", "BlogCatalog", "FacebookPagePage", "Amazon",
                     # "Coauthor", "LINKX", "Chain", "extra"
    name: str        # the name the PyG class (or loader) takes
    label: str       # how the examples print it
    target: Optional[str] = None  # LINKX only: the Facebook100 column that pyg_private's
                                  # load_facebook100 takes as label (None: PyG's LINKXDataset)

    @property
    def raw_subdir(self) -> str:
        if self.collection in ("Planetoid", "Amazon", "Coauthor"):
            return f"{self.name}/raw"
        if self.collection in ("CitationFull", "LINKX"):
            return f"{self.name.lower()}/raw"
        return "raw"

    @property
    def raw_files(self) -> list[str]:
        if self.collection == "Planetoid":
            return [f"ind.{self.name.lower()}.{ext}" for ext in _PLANETOID_EXT]
        if self.collection == "CitationFull":
            return [f"{self.name.lower()}.npz"]
        if self.collection == "BlogCatalog":
            return ["edges.csv", "group-edges.csv", "nodes.csv", "groups.csv"]
        if self.collection == "FacebookPagePage":
            return ["facebook.npz"]
        if self.collection == "Amazon":
            return [f"amazon_electronics_{self.name.lower()}.npz"]
        if self.collection == "Coauthor":
            return [f"ms_academic_{self.name[:3].lower()}.npz"]
        if self.collection == "LINKX":
            return ["data.mat"]
        return []


_SPECS: dict[str, DatasetSpec] = {}
for _n in ("Cora", "CiteSeer", "PubMed"):
    _SPECS[_n.lower()] = _SPECS[f"planetoid/{_n.lower()}"] = DatasetSpec("Planetoid", _n, _n)
    _SPECS[f"citationfull/{_n.lower()}"] = DatasetSpec("CitationFull", _n, f"CitationFull-{_n}")
for _n, _label in (("Cora_ML", "Cora-ML"), ("DBLP", "DBLP")):
    _SPECS[_n.lower()] = _SPECS[f"citationfull/{_n.lower()}"] = DatasetSpec("CitationFull", _n, _label)
_SPECS["cora-ml"] = _SPECS["cora_ml"]
_SPECS["blogcatalog"] = DatasetSpec("BlogCatalog", "BlogCatalog", "BlogCatalog")
_SPECS["facebook"] = _SPECS["facebookpagepage"] = DatasetSpec("FacebookPagePage", "FacebookPagePage", "Facebook")
_SPECS["computers"] = _SPECS["amazon/computers"] = DatasetSpec("Amazon", "Computers", "Computers")
_SPECS["cs"] = _SPECS["coauthor/cs"] = DatasetSpec("Coauthor", "CS", "CS")
_SPECS["cornell"] = _SPECS["cornell5"] = DatasetSpec("LINKX", "cornell5", "Cornell")
_SPECS["cornell-year"] = _SPECS["cornell_year"] = DatasetSpec("LINKX", "cornell5", "Cornell-year", target="year")
for _n in CHAIN_PRESETS:
    _SPECS[_n.lower()] = DatasetSpec("Chain", _n, _n)

#: The names the examples accept (aliases aside).
NAMES = ("Cora", "CiteSeer", "PubMed", "Cora_ML", "DBLP", "CitationFull/Cora", "CitationFull/CiteSeer",
         "CitationFull/PubMed", "BlogCatalog", "Facebook", "Computers", "CS", "Cornell", "Cornell-year",
         *CHAIN_PRESETS)


class DatasetUnavailable(RuntimeError):
    """The dataset's files are neither offline nor downloadable here; the message says what
    to download and where to put it."""


def spec(name: str) -> DatasetSpec:
    """The :class:`DatasetSpec` of ``name`` (case-insensitive), or a ``ValueError`` listing the names."""
    if name in EXTRA:
        return DatasetSpec("extra", name, name)
    found = _SPECS.get(str(name).strip().lower())
    if found is None:
        raise ValueError(f"`--dataset` must be one of {', '.join(NAMES)} (case-insensitive); got {name!r}")
    return found


def file_stem(name: str) -> str:
    """A lower-case file-name stem for outputs (``Cora-ML`` -> ``cora_ml``)."""
    return re.sub(r"[^a-z0-9]+", "_", spec(name).label.lower()).strip("_")


def _what_to_download(s: DatasetSpec) -> str:
    if s.collection == "Planetoid":
        return f"{_PLANETOID_URL}/ind.{s.name.lower()}.{{{','.join(_PLANETOID_EXT)}}}"
    if s.collection == "CitationFull":
        return f"{_CITATION_FULL_URL}/{s.name.lower()}.npz"
    if s.collection == "FacebookPagePage":
        return (f"{_FACEBOOK_PAGE_URL} (PyG's copy, 128 reduced features; the 4,714-feature version is "
                f"the MUSAE release at {_MUSAE_URL}, its facebook_edges, facebook_features and "
                "facebook_target turned into the npz keys edges, features (dense), target)")
    if s.collection in ("Amazon", "Coauthor"):
        return f"{_SHCHUR_URL}/{s.raw_files[0]}"
    if s.collection == "LINKX":
        return f"{_LINKX_URL}/{s.name.capitalize()}.mat, saved as {s.raw_files[0]},"
    return (f"the files {', '.join(s.raw_files)} of the ASU social-computing release of BlogCatalog "
            "(Tang & Liu 2009; 10,312 nodes, 333,983 edges, 39 groups; no stable public URL)")


def _how_to_get(s: DatasetSpec, target: Path) -> str:
    """Where the data comes from: the files to download and the folder to put them in (offline),
    and PyG's own download on a machine with a network (every collection but BlogCatalog)."""
    cached = cache_dir() / s.collection / s.raw_subdir
    where = f"{target}" if target == cached else f"{target} (or into the cache {cached})"
    text = f"download {_what_to_download(s)} into {where}"
    if s.collection != "BlogCatalog":  # the one collection PyG has no downloader for
        text += (f"; or, on a machine with a network, leave PYG_PRIVATE_DATA unset and PyG downloads it "
                 f"into the cache {cache_dir() / s.collection}")
    return text


def _present(folder: Path, files: list[str]) -> bool:
    return all((folder / f).is_file() for f in files)


def _root(s: DatasetSpec) -> str:
    """The root for the PyG class, or :class:`DatasetUnavailable` when the raw files are
    neither offline nor cached and :obj:`$PYG_PRIVATE_DATA` is set (no download is tried then)."""
    offline = data_dir()
    if offline is not None and not _present(offline / s.collection / s.raw_subdir, s.raw_files) \
            and not _present(cache_dir() / s.collection / s.raw_subdir, s.raw_files):
        raise DatasetUnavailable(
            f"{s.label} ({s.collection}) is not available offline: PYG_PRIVATE_DATA={offline} has no "
            f"{s.collection}/{s.raw_subdir}/{s.raw_files[0]}. To use it, "
            + _how_to_get(s, offline / s.collection / s.raw_subdir))
    if offline is not None and not _present(offline / s.collection / s.raw_subdir, s.raw_files):
        return str(cache_dir() / s.collection)  # already in the cache: no copy, no download
    return resolve_root(None, collection=s.collection, raw_subdir=s.raw_subdir)


def load_dataset(name: str, *, seed: int = 0) -> Data:
    """The graph ``name`` as a :class:`~torch_geometric.data.Data`.

    Planetoid graphs carry their public split masks; the other real graphs carry none; a chain
    is generated from ``seed`` (features and split), the others ignore ``seed``. ``Cornell`` and
    ``Cornell-year`` mark unknown labels with ``y = -1``. Nothing is cleaned (self-loops, isolated
    and unlabelled nodes are kept).

    Raises:
        ValueError: for an unknown name.
        DatasetUnavailable: when the files are not offline (or the download failed).
    """
    s = spec(name)
    if s.collection == "extra":
        return EXTRA[name](seed)
    if s.collection == "Chain":
        return load_chain(s.name, seed=seed)
    root = _root(s)
    try:
        if s.collection == "Planetoid":
            from torch_geometric.datasets import Planetoid

            return Planetoid(root, s.name)[0]
        if s.collection == "CitationFull":
            from torch_geometric.datasets import CitationFull

            return CitationFull(root, s.name)[0]
        if s.collection == "FacebookPagePage":
            from torch_geometric.datasets import FacebookPagePage

            return FacebookPagePage(root)[0]
        if s.collection == "Amazon":
            from torch_geometric.datasets import Amazon

            return Amazon(root, s.name)[0]
        if s.collection == "Coauthor":
            from torch_geometric.datasets import Coauthor

            return Coauthor(root, s.name)[0]
        if s.collection == "LINKX":
            if s.target is not None:  # the folder that holds raw/data.mat, inside LINKX's layout
                return load_facebook100(s.name, root=Path(root) / s.name.lower(), label=s.target)
            from torch_geometric.datasets import LINKXDataset

            return LINKXDataset(root, s.name)[0]
        return load_blogcatalog(root)
    except Exception as exc:  # a failed download (no network), a missing or broken raw file
        reason = " ".join(str(exc).split())  # one line, whatever the exception prints
        if data_dir() is None and s.collection != "BlogCatalog":  # PyG's download was tried and failed
            how = (f"PyG downloads it on a machine with a network; without one, download {_what_to_download(s)} "
                   f"into {Path(root) / s.raw_subdir}, or set PYG_PRIVATE_DATA to an offline folder that holds "
                   f"{s.collection}/{s.raw_subdir}/{s.raw_files[0]}")
        else:
            how = "To use it, " + _how_to_get(s, Path(root) / s.raw_subdir)
        raise DatasetUnavailable(f"{s.label} ({s.collection}) could not be loaded ({type(exc).__name__}: {reason}). "
                                 + how) from exc


def check_node_classification(data: Data, name: str) -> None:
    """A ``ValueError`` unless ``data`` has node features and one class label per node."""
    if data.x is None:
        raise ValueError(f"{spec(name).label} has no node features, which node classification needs; use it "
                         "with examples/blogcatalog_ppr.py (personalized PageRank needs only the edges)")
    if data.y is None or data.y.dim() != 1:
        raise ValueError(f"{spec(name).label} has no single-label node classes (its labels are multi-label); "
                         "use it with examples/blogcatalog_ppr.py")


def load_or_exit(parser: argparse.ArgumentParser, name: str, *, seed: int = 0,
                 classification: bool = True) -> Data:
    """:func:`load_dataset`, with an unknown, unavailable or unsuitable dataset reported as a
    one-line error (exit status 2, no traceback).

    An absent dataset is not a usage error: its message (``prog: error: ...``, one line saying where
    the data comes from: the offline folder, or PyG's download on a machine with a network) is
    printed without the usage. An unknown or unsuitable name is reported by ``parser.error`` (the
    usage, then the error line)."""
    try:
        data = load_dataset(name, seed=seed)
        if classification:
            check_node_classification(data, name)
        return data
    except DatasetUnavailable as exc:
        parser.exit(2, f"{parser.prog}: error: {' '.join(str(exc).split())}\n")
        raise  # unreachable: parser.exit exits
    except ValueError as exc:
        parser.error(str(exc))
        raise  # unreachable: parser.error exits


def _dataset_name(value: str) -> str:
    """``argparse`` type: an accepted dataset name (an unknown one is a usage error, exit status 2)."""
    try:
        spec(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def add_dataset_argument(parser: argparse.ArgumentParser, default: str | Sequence[str], *,
                         nargs: Optional[str] = None, extra: Sequence[str] = (),
                         names: Optional[Sequence[str]] = None) -> None:
    """``--dataset`` with the accepted names in its help; an unknown name is a usage error.

    With ``nargs="+"`` the option is ``--datasets`` (several names; ``--dataset`` is accepted too) and
    ``default`` may be a list. ``extra`` are names the script generates itself (no files; loading them
    is the script's job), accepted and listed first. ``names`` restricts the accepted names of
    :data:`NAMES` to those the script can run on (default: all)."""
    allowed = None if names is None else {spec(n) for n in names}
    names = (*extra, *(NAMES if names is None else names))
    flags = ("--datasets", "--dataset") if nargs else ("--dataset",)

    def dataset_name(value: str) -> str:
        for name in extra:
            if value.strip().lower() == name.lower():
                return name
        value = _dataset_name(value)
        if allowed is not None and spec(value) not in allowed:
            raise argparse.ArgumentTypeError(f"`--dataset` must be one of {', '.join(names)} here "
                                             f"(case-insensitive); got {value!r}")
        return value

    if nargs:
        default = [default] if isinstance(default, str) else list(default)
    shown = " ".join(default) if nargs else default
    parser.add_argument(*flags, dest=flags[0][2:], nargs=nargs, type=dataset_name, default=default,
                        help=f"one of {', '.join(names)} (case-insensitive; offline from $PYG_PRIVATE_DATA, or "
                             f"PyG's download on a machine with a network) (default: {shown})")


def describe(data: Data, name: str) -> str:
    """One line: nodes, undirected edges, features, classes (from the labels ``y >= 0``; the nodes
    with ``y = -1``, unknown, are counted apart)."""
    parts = [f"{spec(name).label}: {data.num_nodes} nodes", f"{data.edge_index.size(1) // 2} undirected edges"]
    if data.x is not None:
        parts.append(f"{data.x.size(1)} features")
    if data.y is not None:
        if data.y.dim() == 1:
            known = data.y[data.y >= 0]
            parts.append(f"{int(known.max()) + 1 if known.numel() else 0} classes")
            if known.numel() < data.y.numel():
                parts.append(f"{data.y.numel() - known.numel()} unlabelled nodes (y = -1)")
        else:
            parts.append(f"{data.y.size(1)} classes")
    return ", ".join(parts)


if __name__ == "__main__":  # python examples/example_data.py NAME ...: what loads here, and how long it took
    for arg in sys.argv[1:] or NAMES:
        start = time.perf_counter()
        try:
            line = describe(load_dataset(arg), arg)
        except (ValueError, DatasetUnavailable) as error:
            line = f"{arg}: {error}"
        print(f"{line} [{time.perf_counter() - start:.1f} s]", flush=True)
