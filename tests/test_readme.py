"""Every ```python block of README.md runs as written: no names are injected.

Each block runs in a fresh namespace, in a temporary working directory. The one piece of set-up is
data: a block that loads Cora with PyG's ``Planetoid`` reads ``data/Planetoid`` (where PyG downloads
it), and the test puts the offline Cora files there first (``$PYG_PRIVATE_DATA/Planetoid/Cora``),
so that the block runs offline; it skips when those files are absent."""
from __future__ import annotations

import os
import re
import shutil
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def _data_root() -> Path | None:
    env = os.environ.get("PYG_PRIVATE_DATA")
    for candidate in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "data"]:
        if (candidate / "Planetoid" / "Cora").is_dir():
            return candidate
    return None


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_block_runs(index, tmp_path, monkeypatch):
    block = BLOCKS[index]
    monkeypatch.chdir(tmp_path)
    if "Planetoid(" in block:
        data = _data_root()
        if data is None:
            pytest.skip("needs the offline Cora files ($PYG_PRIVATE_DATA/Planetoid/Cora)")
        shutil.copytree(data / "Planetoid" / "Cora", tmp_path / "data" / "Planetoid" / "Cora")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(block, f"README.md block {index}", "exec"), {"__name__": "__readme__"})
