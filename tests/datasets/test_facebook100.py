"""Facebook100 (GAP's class-year task): a tiny hand-written ``.mat`` file and Cornell's real one."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.io import savemat
from torch_geometric.utils import coalesce, is_undirected

from pyg_private.datasets import Facebook100, facebook100_dataset, load_facebook100
from pyg_private.datasets.facebook100 import _download_url, read_facebook100

#: status, gender, major, minor, dorm, year, high school (0 = missing)
_INFO = np.array([
    [1, 1, 50, 0, 7, 2005, 11],
    [1, 2, 60, 50, 8, 2006, 12],
    [2, 0, 50, 60, 0, 2005, 11],
    [1, 1, 0, 0, 7, 0, 13],
    [2, 2, 60, 0, 8, 2006, 0],
    [1, 1, 50, 0, 9, 2007, 12],
], dtype=np.uint16)
_EDGES = [(0, 1), (1, 2), (2, 3), (0, 5)]


def _write_mat(folder: Path, info: np.ndarray = _INFO, edges=_EDGES, *, symmetric: bool = True,
               loops: tuple[int, ...] = ()) -> Path:
    n = info.shape[0]
    rows = [u for u, v in edges] + ([v for u, v in edges] if symmetric else []) + list(loops)
    cols = [v for u, v in edges] + ([u for u, v in edges] if symmetric else []) + list(loops)
    adj = sp.csc_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    raw = folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    savemat(raw / "data.mat", {"A": adj, "local_info": info})
    return raw / "data.mat"


def test_one_hot_features_follow_gap(tmp_path):
    data, classes = read_facebook100(_write_mat(tmp_path), min_class_size=1)
    # GAP's columns: status (1, 2), gender (1, 2), major (50, 60), minor (50, 60), dorm (7, 8, 9);
    # neither the label (year) nor high school.
    assert data.x.dtype == torch.float32 and data.x.shape == (6, 2 + 2 + 2 + 2 + 3)
    assert data.x.tolist()[0] == [1, 0, 1, 0, 1, 0, 0, 0, 1, 0, 0]
    assert data.x.tolist()[2] == [0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0]  # gender, dorm missing: zero blocks
    assert data.x.tolist()[3] == [1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0]  # major, minor missing
    assert classes == [2005, 2006, 2007]


def test_label_mapping_and_unknowns(tmp_path):
    path = _write_mat(tmp_path)
    data, classes = read_facebook100(path, min_class_size=1)
    assert data.y.dtype == torch.long and data.y.tolist() == [0, 1, 0, -1, 1, 2]
    # GAP's class filter: a year held by fewer than min_class_size nodes becomes unknown.
    data, classes = read_facebook100(path, min_class_size=2)
    assert classes == [2005, 2006] and data.y.tolist() == [0, 1, 0, -1, 1, -1]
    assert data.num_nodes == 6  # no node is removed
    data, classes = read_facebook100(path, label="gender", min_class_size=1)
    assert classes == [1, 2] and data.y.tolist() == [0, 1, -1, 0, 1, 0]
    assert data.x.shape[1] == 2 + 2 + 2 + 3 + 3  # status, major, minor, dorm, year


def test_other_labels_and_feature_choices(tmp_path):
    path = _write_mat(tmp_path)
    data, classes = read_facebook100(path, label="housing", features=["year", "high_school"],
                                     min_class_size=1)
    assert classes == [7, 8, 9] and data.y.tolist() == [0, 1, -1, 0, 1, 2]
    assert data.x.shape == (6, 3 + 3)
    assert data.x[4].tolist() == [0, 1, 0, 0, 0, 0]  # high school missing
    with pytest.raises(ValueError, match="label column"):
        read_facebook100(path, features=["gender", "year"])
    with pytest.raises(ValueError, match="must be one of"):
        read_facebook100(path, label="age")
    with pytest.raises(ValueError, match="at least 1"):
        read_facebook100(path, min_class_size=0)


def test_edges_are_simple_and_undirected(tmp_path):
    data, _ = read_facebook100(_write_mat(tmp_path), min_class_size=1)
    assert data.edge_index.tolist() == [[0, 0, 1, 1, 2, 2, 3, 5], [1, 5, 0, 2, 1, 3, 2, 0]]
    with pytest.warns(UserWarning, match="1 self-loop.*4 reverse edge"):
        data, _ = read_facebook100(_write_mat(tmp_path / "b", symmetric=False, loops=(4,)),
                                   min_class_size=1)
    assert data.edge_index.tolist() == [[0, 0, 1, 1, 2, 2, 3, 5], [1, 5, 0, 2, 1, 3, 2, 0]]
    assert data.num_nodes == 6  # node 4 is isolated but kept


def test_dataset_class_and_explicit_root(tmp_path, clean_env):
    _write_mat(tmp_path)
    dataset = Facebook100(str(tmp_path), min_class_size=2)
    assert dataset.classes == [2005, 2006] and dataset.num_classes == 2
    assert repr(dataset) == "Facebook100(cornell5, label=year)"
    assert (tmp_path / "processed" / "facebook100").is_dir()
    data = load_facebook100(root=tmp_path, label="gender", min_class_size=1)
    assert data.y.tolist() == [0, 1, -1, 0, 1, 0]
    assert Facebook100(str(tmp_path), min_class_size=2).classes == [2005, 2006]  # reloaded


def test_env_var_copies_into_the_cache(tmp_path, clean_env, snapshot):
    _write_mat(tmp_path / "data" / "LINKX" / "tiny1")
    before = snapshot(tmp_path / "data")
    clean_env.setenv("PYG_PRIVATE_DATA", str(tmp_path / "data"))
    clean_env.setenv("PYG_PRIVATE_CACHE", str(tmp_path / "cache"))
    data = load_facebook100("Tiny1", min_class_size=2)
    assert data.y.tolist() == [0, 1, 0, -1, 1, -1]
    assert snapshot(tmp_path / "data") == before
    assert (tmp_path / "cache" / "LINKX" / "tiny1" / "raw" / "data.mat").is_file()
    with pytest.raises(ValueError, match="must not lie inside"):
        load_facebook100(root=tmp_path / "data" / "LINKX" / "tiny1")


def test_download_sources(tmp_path):
    assert _download_url("cornell5").endswith("/Non-Homophily-Large-Scale/raw/master/data/facebook100/Cornell5.mat")
    assert _download_url("UIllinois20").endswith("/sisaman/pyg-datasets/raw/main/datasets/facebook100/UIllinois20.mat")
    assert _download_url("nowhere1") is None
    with pytest.raises(FileNotFoundError, match="not a school this loader can download"):
        Facebook100(str(tmp_path), name="nowhere1")


def test_cornell_class_year(shared_data, tmp_path, copy_tree):
    root = copy_tree(shared_data / "LINKX" / "cornell5", tmp_path / "cornell5")
    dataset = facebook100_dataset(root=root)
    data = dataset[0]
    assert data.num_nodes == 18660 and data.x.shape == (18660, 349)
    assert data.edge_index.shape == (2, 2 * 790777)
    ei = data.edge_index
    assert is_undirected(ei, num_nodes=data.num_nodes) and not bool((ei[0] == ei[1]).any())
    assert coalesce(ei, num_nodes=data.num_nodes).size(1) == ei.size(1)
    assert dataset.classes == [2004, 2005, 2006, 2007, 2008, 2009]
    counts = torch.bincount(data.y[data.y >= 0], minlength=6).tolist()
    print("Cornell5 class-year counts:", dict(zip(dataset.classes, counts)),
          "unknown or rarer year:", int((data.y < 0).sum()))
    assert counts == [1695, 2518, 2690, 2942, 2882, 2647]
    assert int((data.y == -1).sum()) == 2498 + 788
    assert set(data.y.unique().tolist()) == {-1, 0, 1, 2, 3, 4, 5}
    # Every feature row is one-hot per known column: at most 5 ones.
    assert set(data.x.unique().tolist()) == {0.0, 1.0} and int(data.x.sum(1).max()) == 5
