"""Root resolution: explicit root, offline copy into the cache, download fallback."""
from __future__ import annotations

from pathlib import Path

import pytest

from pyg_private.datasets import cache_dir, data_dir, resolve_root


@pytest.fixture
def fake_data(tmp_path: Path) -> Path:
    raw = tmp_path / "data" / "Collection" / "Name" / "raw"
    raw.mkdir(parents=True)
    (raw / "a.txt").write_text("alpha")
    (raw / "b.bin").write_bytes(b"\x00\x01")
    return tmp_path / "data"


def test_explicit_root_is_used_as_is(tmp_path, clean_env):
    assert resolve_root(tmp_path / "x", collection="C", raw_subdir="raw") == \
        str(tmp_path / "x")
    assert resolve_root(str(tmp_path), collection="C", raw_subdir="raw") == str(tmp_path)
    assert not (tmp_path / "x").exists()


def test_default_cache(clean_env):
    assert data_dir() is None
    assert cache_dir() == (Path.home() / ".cache" / "pyg_private").resolve()


def test_no_data_env_means_download_into_cache(tmp_path, clean_env):
    clean_env.setenv("PYG_PRIVATE_CACHE", str(tmp_path / "cache"))
    root = resolve_root(None, collection="Planetoid", raw_subdir="Cora/raw")
    assert root == str((tmp_path / "cache" / "Planetoid").resolve())
    assert not (tmp_path / "cache").exists()  # nothing copied; PyG downloads


def test_raw_files_are_copied_into_the_cache(fake_data, tmp_path, clean_env, snapshot):
    clean_env.setenv("PYG_PRIVATE_DATA", str(fake_data))
    clean_env.setenv("PYG_PRIVATE_CACHE", str(tmp_path / "cache"))
    before = snapshot(fake_data)
    root = Path(resolve_root(None, collection="Collection", raw_subdir="Name/raw"))
    assert root == (tmp_path / "cache" / "Collection").resolve()
    assert (root / "Name" / "raw" / "a.txt").read_text() == "alpha"
    assert (root / "Name" / "raw" / "b.bin").read_bytes() == b"\x00\x01"
    assert snapshot(fake_data) == before


def test_changed_raw_files_invalidate_processed(fake_data, tmp_path, clean_env):
    clean_env.setenv("PYG_PRIVATE_DATA", str(fake_data))
    clean_env.setenv("PYG_PRIVATE_CACHE", str(tmp_path / "cache"))
    root = Path(resolve_root(None, collection="Collection", raw_subdir="Name/raw"))
    processed = root / "Name" / "processed"
    processed.mkdir()
    resolve_root(None, collection="Collection", raw_subdir="Name/raw")
    assert processed.is_dir()  # unchanged raw files keep processed/
    (fake_data / "Collection" / "Name" / "raw" / "a.txt").write_text("alpha, longer")
    resolve_root(None, collection="Collection", raw_subdir="Name/raw")
    assert not processed.exists()
    assert (root / "Name" / "raw" / "a.txt").read_text() == "alpha, longer"


def test_missing_dataset_falls_back_to_download(fake_data, tmp_path, clean_env):
    clean_env.setenv("PYG_PRIVATE_DATA", str(fake_data))
    clean_env.setenv("PYG_PRIVATE_CACHE", str(tmp_path / "cache"))
    with pytest.warns(UserWarning, match="does not exist"):
        root = resolve_root(None, collection="Other", raw_subdir="raw")
    assert root == str((tmp_path / "cache" / "Other").resolve())


def test_cache_inside_data_is_refused(fake_data, clean_env):
    clean_env.setenv("PYG_PRIVATE_DATA", str(fake_data))
    clean_env.setenv("PYG_PRIVATE_CACHE", str(fake_data / "cache"))
    with pytest.raises(ValueError, match="PYG_PRIVATE_CACHE"):
        resolve_root(None, collection="Collection", raw_subdir="Name/raw")
    assert not (fake_data / "cache").exists()


def test_root_inside_data_is_refused(fake_data, clean_env):
    clean_env.setenv("PYG_PRIVATE_DATA", str(fake_data))
    with pytest.raises(ValueError, match="`root`"):
        resolve_root(fake_data / "Collection", collection="Collection", raw_subdir="raw")
