"""examples/example_data.py: the larger offline graphs (Facebook Page-Page, Amazon Computers,
Coauthor CS, Facebook100 Cornell with the gender and the class-year label)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

NEW = {  # name: (collection, raw folder relative to the collection, raw file)
    "Facebook": ("FacebookPagePage", "raw", "facebook.npz"),
    "Computers": ("Amazon", "Computers/raw", "amazon_electronics_computers.npz"),
    "CS": ("Coauthor", "CS/raw", "ms_academic_cs.npz"),
    "Cornell": ("LINKX", "cornell5/raw", "data.mat"),
    "Cornell-year": ("LINKX", "cornell5/raw", "data.mat"),
}


@pytest.fixture
def example_data(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import example_data

    return example_data


@pytest.mark.parametrize("name", sorted(NEW))
def test_specs_match_the_offline_layout(example_data, name):
    s = example_data.spec(name.upper())
    collection, raw_subdir, raw_file = NEW[name]
    assert name in example_data.NAMES
    assert (s.collection, s.raw_subdir, s.raw_files) == (collection, raw_subdir, [raw_file])
    assert s.label == name


def test_aliases_and_stems(example_data):
    assert example_data.spec("Amazon/Computers") == example_data.spec("computers")
    assert example_data.spec("coauthor/cs") == example_data.spec("CS")
    assert example_data.spec("cornell5") == example_data.spec("Cornell")
    assert example_data.spec("cornell-year").target == "year" and example_data.spec("Cornell").target is None
    assert example_data.file_stem("Cornell-year") == "cornell_year"


@pytest.mark.parametrize("name", sorted(NEW))
def test_absent_graph_says_what_to_download(example_data, tmp_path, monkeypatch, name):
    monkeypatch.setenv("PYG_PRIVATE_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("PYG_PRIVATE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(example_data.DatasetUnavailable, match=NEW[name][2]) as info:
        example_data.load_dataset(name)
    assert "download http" in str(info.value) and str(tmp_path / "empty") in str(info.value)
    assert not (tmp_path / "cache").exists()


def test_describe_counts_classes_from_known_labels(example_data):
    data = Data(x=torch.ones(4, 2), edge_index=torch.tensor([[0, 1], [1, 0]]), y=torch.tensor([-1, 0, 2, -1]))
    line = example_data.describe(data, "Cornell")
    assert line == "Cornell: 4 nodes, 1 undirected edges, 2 features, 3 classes, 2 unlabelled nodes (y = -1)"
    data.y = torch.full((4,), -1)
    assert "0 classes" in example_data.describe(data, "Cornell")


def test_cornell_year_loads_offline(example_data, offline):
    offline("LINKX/cornell5/raw")
    data = example_data.load_dataset("Cornell-year")
    assert data.num_nodes == 18660 and data.edge_index.size(1) == 2 * 790777 and data.x.size(1) == 349
    assert torch.bincount(data.y[data.y >= 0]).tolist() == [1695, 2518, 2690, 2942, 2882, 2647]
    example_data.check_node_classification(data, "Cornell-year")


def test_computers_loads_offline(example_data, offline):
    offline("Amazon/Computers/raw")
    data = example_data.load_dataset("Computers")
    assert (data.num_nodes, data.edge_index.size(1), data.x.size(1)) == (13752, 491722, 767)
    assert example_data.describe(data, "Computers").endswith("10 classes")
