"""Cora and Cora-ML loaded offline from copies of the shared raw files."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pyg_private.datasets import cora_dataset, cora_ml_dataset, load_cora, load_cora_ml


@pytest.fixture(scope="module")
def cora(offline_copy):
    return load_cora(offline_copy("Planetoid"))


@pytest.fixture(scope="module")
def cora_ml(offline_copy):
    return load_cora_ml(offline_copy("CitationFull"))


def test_cora_sizes(cora):
    assert cora.num_nodes == 2708
    assert cora.edge_index.shape == (2, 10556)
    assert cora.x.shape == (2708, 1433)
    assert int(cora.y.max()) + 1 == 7
    assert cora.is_undirected() and not cora.has_self_loops()
    assert [int(m.sum()) for m in (cora.train_mask, cora.val_mask, cora.test_mask)] == \
        [140, 500, 1000]


def test_cora_ml_sizes(cora_ml):
    assert cora_ml.num_nodes == 2995
    assert cora_ml.edge_index.shape == (2, 16316)
    assert cora_ml.x.shape == (2995, 2879)
    assert int(cora_ml.y.max()) + 1 == 7
    assert cora_ml.is_undirected() and not cora_ml.has_self_loops()
    assert not cora_ml.has_isolated_nodes()


def test_dataset_objects(offline_copy):
    assert cora_dataset(offline_copy("Planetoid")).num_classes == 7
    assert cora_ml_dataset(offline_copy("CitationFull")).num_classes == 7


def test_transform_is_applied(offline_copy):
    def mark(data):
        data = data.clone()
        data.marked = torch.tensor([1])
        return data
    assert hasattr(load_cora(offline_copy("Planetoid"), transform=mark), "marked")


def test_env_var_path_writes_nothing_into_data(shared_data, tmp_path, clean_env, copy_tree,
                                               snapshot):
    data = copy_tree(shared_data / "Planetoid", tmp_path / "data" / "Planetoid")
    copy_tree(shared_data / "CitationFull", tmp_path / "data" / "CitationFull")
    cache = tmp_path / "cache"
    before = snapshot(tmp_path / "data")
    clean_env.setenv("PYG_PRIVATE_DATA", str(tmp_path / "data"))
    clean_env.setenv("PYG_PRIVATE_CACHE", str(cache))

    cora = load_cora()
    cora_ml = load_cora_ml()
    assert cora.num_nodes == 2708 and cora.edge_index.size(1) == 10556
    assert cora_ml.num_nodes == 2995 and cora_ml.edge_index.size(1) == 16316
    assert snapshot(tmp_path / "data") == before
    assert (cache / "Planetoid" / "Cora" / "processed").is_dir()
    assert (cache / "CitationFull" / "cora_ml" / "processed").is_dir()
    assert sorted(p.name for p in (cache / "Planetoid" / "Cora" / "raw").iterdir()) == \
        sorted(p.name for p in (data / "Cora" / "raw").iterdir())

    # A second load reuses the cache and still writes nothing into the data folder.
    assert load_cora().num_nodes == 2708
    assert snapshot(tmp_path / "data") == before


def test_explicit_root_inside_data_folder_is_refused(shared_data, clean_env):
    clean_env.setenv("PYG_PRIVATE_DATA", str(shared_data))
    with pytest.raises(ValueError, match="root"):
        load_cora(Path(shared_data) / "Planetoid")
