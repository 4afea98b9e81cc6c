"""BlogCatalog: the real release (offline copy) and tiny hand-written raw folders."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch_geometric.utils import coalesce, is_undirected

from pyg_private.datasets import BlogCatalog, load_blogcatalog, read_blogcatalog


@pytest.fixture(scope="module")
def blog(offline_copy):
    return load_blogcatalog(offline_copy("BlogCatalog"))


def test_sizes(blog):
    assert blog.num_nodes == 10312
    assert blog.edge_index.shape == (2, 2 * 333983)
    assert blog.x is None
    assert blog.y.shape == (10312, 39) and blog.y.dtype == torch.float
    assert set(blog.y.unique().tolist()) == {0.0, 1.0}
    assert int(blog.y.sum()) == 14476  # group memberships in group-edges.csv
    assert bool((blog.y.sum(1) >= 1).all())  # every blogger is in a group
    assert bool((blog.y.sum(0) >= 1).all())  # every group has a member


def test_simple_undirected_graph(blog):
    ei = blog.edge_index
    assert is_undirected(ei, num_nodes=blog.num_nodes)
    assert not bool((ei[0] == ei[1]).any())
    assert coalesce(ei, num_nodes=blog.num_nodes).size(1) == ei.size(1)  # no duplicates
    assert int(ei.min()) == 0 and int(ei.max()) == blog.num_nodes - 1
    assert not blog.has_isolated_nodes()


def test_dataset_object(offline_copy):
    dataset = BlogCatalog(str(offline_copy("BlogCatalog")))
    assert len(dataset) == 1 and dataset.num_classes == 39 and dataset.num_features == 0
    assert repr(dataset) == "BlogCatalog()"


def test_env_var_path(shared_data, tmp_path, clean_env, copy_tree, snapshot):
    copy_tree(shared_data / "BlogCatalog", tmp_path / "data" / "BlogCatalog")
    before = snapshot(tmp_path / "data")
    clean_env.setenv("PYG_PRIVATE_DATA", str(tmp_path / "data"))
    clean_env.setenv("PYG_PRIVATE_CACHE", str(tmp_path / "cache"))
    assert load_blogcatalog().num_nodes == 10312
    assert snapshot(tmp_path / "data") == before
    assert (tmp_path / "cache" / "BlogCatalog" / "processed" / "data.pt").is_file()


def _write_raw(root: Path, edges: str, memberships: str = "1,1\n2,2\n3,1\n4,2\n",
               nodes: str = "1\n2\n3\n4\n", groups: str = "1\n2\n") -> Path:
    raw = root / "raw"
    raw.mkdir(parents=True)
    for name, text in (("edges.csv", edges), ("group-edges.csv", memberships),
                       ("nodes.csv", nodes), ("groups.csv", groups)):
        (raw / name).write_text(text)
    return raw


def test_tiny_graph(tmp_path):
    data = BlogCatalog(str(_write_raw(tmp_path, "1,2\n2,3\n1,4")).rsplit("/raw", 1)[0])[0]
    assert data.num_nodes == 4
    assert data.edge_index.tolist() == [[0, 0, 1, 1, 2, 3], [1, 3, 0, 2, 1, 0]]
    assert data.y.tolist() == [[1, 0], [0, 1], [1, 0], [0, 1]]


def test_self_loops_and_duplicates_are_dropped_with_a_warning(tmp_path):
    raw = _write_raw(tmp_path, "1,2\n2,1\n3,3\n1,2\n2,3\n")
    with pytest.warns(UserWarning, match="1 self-loop.*2 duplicate"):
        data = read_blogcatalog(str(raw))
    assert data.edge_index.tolist() == [[0, 1, 1, 2], [1, 0, 2, 1]]


def test_clean_file_gives_no_warning(tmp_path):
    raw = _write_raw(tmp_path, "1,2\n2,3\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_blogcatalog(str(raw))


def test_unknown_node_id_raises(tmp_path):
    with pytest.raises(ValueError, match="node id"):
        read_blogcatalog(str(_write_raw(tmp_path, "1,2\n2,9\n")))


def test_unknown_group_id_raises(tmp_path):
    with pytest.raises(ValueError, match="group id"):
        read_blogcatalog(str(_write_raw(tmp_path, "1,2\n", memberships="1,1\n2,7\n")))


def test_missing_raw_files_raise_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no stable public URL"):
        BlogCatalog(str(tmp_path / "BlogCatalog"))
