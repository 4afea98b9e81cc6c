"""The version is single-sourced: ``pyg_private.__version__`` is what setup.cfg reads, what the
installed distribution reports, and what CITATION.cff cites. Runs from a clone and from an unpacked
sdist (which carries setup.cfg and CITATION.cff)."""
from __future__ import annotations

import configparser
import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.version import Version

import pyg_private

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_a_pep440_release():
    assert str(Version(pyg_private.__version__)) == pyg_private.__version__


def test_setup_cfg_reads_the_version_from_the_package():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["metadata"]["version"].strip() == "attr: pyg_private.__version__"


def test_citation_cites_the_package_version():
    text = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    assert re.search(r"^cff-version: 1\.2\.0$", text, re.M)
    found = re.findall(r"""^version:\s*["']?([^"'\s#]+)["']?\s*$""", text, re.M)
    assert found == [pyg_private.__version__], f"CITATION.cff cites {found}, the package is {pyg_private.__version__}"


def test_installed_metadata_matches_the_imported_package():
    """Where the imported package is the installed distribution's own files (a wheel or an sdist
    installed), its metadata carries the same version."""
    try:
        dist = metadata.distribution("pyg-private")
    except metadata.PackageNotFoundError:
        pytest.skip("pyg-private is not installed (imported from a source tree)")
    installed = Path(dist.locate_file("pyg_private/__init__.py")).resolve()
    if installed != Path(pyg_private.__file__).resolve():
        pytest.skip(f"the imported package ({pyg_private.__file__}) is not the installed distribution's files")
    assert dist.version == pyg_private.__version__
    assert dist.metadata["License-Expression"] == "MIT"
    assert not [c for c in dist.metadata.get_all("Classifier") or [] if c.startswith("License ::")]
