"""Fixtures for the dataset tests: offline copies of ``shared/data`` in temporary folders.

The offline folder is ``$PYG_PRIVATE_DATA`` if set, else the first ``shared/data``
found above this file (the repository sits next to ``shared/``). Tests that need it
are skipped cleanly when it is absent. Nothing is ever written into it: every test
copies what it needs into a temporary folder first.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

import pytest


def find_shared_data() -> Path | None:
    """Returns the offline data folder, or ``None`` if there is none."""
    env = os.environ.get("PYG_PRIVATE_DATA", "")
    if env:
        path = Path(env).expanduser()
        return path.resolve() if path.is_dir() else None
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return None


def _copy_tree(src: Path, dst: Path) -> Path:
    """Copies the files under ``src`` into ``dst`` (bytes only, so the copy is writable)."""
    for file in src.rglob("*"):
        if file.is_file():
            target = dst / file.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)
    return dst


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``folder`` with its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*")}


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = find_shared_data()
    if path is None:
        pytest.skip("offline data folder (PYG_PRIVATE_DATA or ../shared/data) not found")
    return path


@pytest.fixture(scope="module")
def offline_copy(shared_data: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Callable[[str], Path]:
    """Copies ``shared_data/<collection>`` into a fresh temporary folder; returns the copy."""
    def copy(collection: str) -> Path:
        src = shared_data / collection
        if not src.is_dir():
            pytest.skip(f"{src} not found")
        return _copy_tree(src, tmp_path_factory.mktemp("data") / collection)
    return copy


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """Unsets PYG_PRIVATE_DATA and PYG_PRIVATE_CACHE for the test."""
    monkeypatch.delenv("PYG_PRIVATE_DATA", raising=False)
    monkeypatch.delenv("PYG_PRIVATE_CACHE", raising=False)
    return monkeypatch


@pytest.fixture(scope="session")
def copy_tree() -> Callable[[Path, Path], Path]:
    """The function ``copy_tree(src, dst)``: copies the files under ``src`` into ``dst``; skips the
    test when ``src`` is absent (an offline folder that holds only some of the datasets)."""
    def copy(src: Path, dst: Path) -> Path:
        if not src.is_dir():
            pytest.skip(f"{src} not found")
        return _copy_tree(src, dst)
    return copy


@pytest.fixture(scope="session")
def snapshot() -> Callable[[Path], dict[str, tuple[int, int]]]:
    """The function ``snapshot(folder)``: every path under it with size and mtime."""
    return _snapshot
