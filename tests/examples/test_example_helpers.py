"""The examples' shared helpers: the CSV written row by row, progress bars kept off stdout, and the
dataset loader's names and error messages."""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

import pytest
import torch
from torch_geometric.data import Data

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def helpers(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import example_data
    import example_io

    return example_io, example_data


def _read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_csv_rows_are_on_disk_as_they_are_written(helpers, tmp_path):
    example_io, _ = helpers
    path = tmp_path / "sub" / "rows.csv"
    writer = example_io.CsvWriter(str(path))
    writer.write({"a": 1, "b": 2})
    assert _read(path) == [{"a": "1", "b": "2"}]  # before close: an interrupted run keeps it
    writer.write({"a": 3, "c": 4})  # a new column: the header is extended, earlier rows kept
    assert _read(path) == [{"a": "1", "b": "2", "c": ""}, {"a": "3", "b": "", "c": "4"}]
    writer.write({"c": 5})
    writer.close()
    assert [r["c"] for r in _read(path)] == ["", "4", "5"]
    assert not (tmp_path / "sub" / "rows.csv.tmp").exists()


def test_progress_bars_go_to_stderr_only(helpers, capsys):
    example_io, _ = helpers
    for _ in example_io.progress(range(3), desc="work"):
        example_io.say("row")
    out, err = capsys.readouterr()
    assert out == "row\nrow\nrow\n"
    assert "work" in err and "3/3" in err  # the outermost bar is shown (and kept) in a log


def test_tqdm_disable_turns_the_bars_off(helpers, capsys, monkeypatch):
    example_io, _ = helpers
    monkeypatch.setenv("TQDM_DISABLE", "1")
    assert list(example_io.progress(range(3), desc="work")) == [0, 1, 2]
    assert "work" not in capsys.readouterr().err


def test_dataset_names(helpers):
    _, example_data = helpers
    assert example_data.spec("cora").collection == "Planetoid"
    assert example_data.spec("Cora-ML") == example_data.spec("CitationFull/Cora_ML")
    assert example_data.spec("CitationFull/Cora").collection == "CitationFull"
    assert example_data.spec("dblp").name == "DBLP"
    assert example_data.spec("chain-x").collection == "Chain"
    assert example_data.file_stem("Cora_ML") == "cora_ml"
    with pytest.raises(ValueError, match="`--dataset` must be one of .*CiteSeer"):
        example_data.spec("Karate")


@pytest.mark.parametrize("name, missing", [("CiteSeer", "ind.citeseer"), ("DBLP", "dblp.npz"),
                                           ("BlogCatalog", "edges.csv")])
def test_absent_dataset_says_what_to_download(helpers, tmp_path, monkeypatch, name, missing):
    _, example_data = helpers
    monkeypatch.setenv("PYG_PRIVATE_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("PYG_PRIVATE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(example_data.DatasetUnavailable, match=missing) as info:
        example_data.load_dataset(name)
    assert "download" in str(info.value) and str(tmp_path / "empty") in str(info.value)
    assert not (tmp_path / "cache").exists()  # nothing was downloaded or copied


def test_unsuitable_or_absent_dataset_is_a_clean_exit(helpers, tmp_path, monkeypatch, capsys):
    _, example_data = helpers
    monkeypatch.setenv("PYG_PRIVATE_DATA", str(tmp_path))
    monkeypatch.setenv("PYG_PRIVATE_CACHE", str(tmp_path / "cache"))
    parser = argparse.ArgumentParser(prog="example")
    with pytest.raises(SystemExit) as info:
        example_data.load_or_exit(parser, "PubMed")
    assert info.value.code == 2 and "PubMed (Planetoid) is not available offline" in capsys.readouterr().err
    featureless = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), y=torch.zeros(2, 3), num_nodes=2)
    with pytest.raises(ValueError, match="no node features"):
        example_data.check_node_classification(featureless, "BlogCatalog")
    featureless.x = torch.ones(2, 1)
    with pytest.raises(ValueError, match="multi-label"):
        example_data.check_node_classification(featureless, "BlogCatalog")


def test_chain_loads_per_seed(helpers):
    _, example_data = helpers
    a, b = example_data.load_dataset("Chain-S", seed=0), example_data.load_dataset("Chain-S", seed=1)
    assert a.num_nodes == b.num_nodes == 48 and not bool((a.train_mask == b.train_mask).all())
