"""Every example script follows the examples' convention (see ``examples/example_io.py``):

* its ``--help`` lists ``--dataset`` (or ``--datasets``), ``--quick``, ``--threads`` with its default
  of 1 stated (and the option's default is 1), and ``--out``;
* without the dataset's files (``$PYG_PRIVATE_DATA`` an empty folder, an empty cache), it stops
  with exit status 2 and **one** line on stderr that says where the data comes from (the offline
  folder, or PyG's download), and no traceback.

The scripts are found by globbing ``examples/*.py`` minus the helper modules (``example_*.py``,
``*_common.py``, ``link_anchors.py``), so a new script is covered as soon as it lands. The checks
run in-process (the script's ``main()`` with ``sys.argv`` set, as the other example tests do):
``--help`` and a run that fails at its first load cost milliseconds once torch and PyG are
imported. One script is also run in a fresh interpreter, as a user runs it.

Which no-data run: a script whose default dataset is read from files runs with its defaults. A
script whose default is generated (the chains, the demo's synthetic graph) runs with ``--dataset
Cora`` where it accepts it (the same loading path); one whose default is a name of its own (not in
``example_data``) is taken to read files and runs with its defaults.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import EXAMPLES

ROOT = EXAMPLES.parent


def _is_helper(path: Path) -> bool:
    return path.name.startswith("example_") or path.stem.endswith("_common") or path.stem == "link_anchors"


#: every example script (the helper modules aside), found by the glob
SCRIPTS = sorted(p.stem for p in EXAMPLES.glob("*.py") if not _is_helper(p))


@pytest.fixture
def run_script(monkeypatch, capsys):
    """``run_script(name, *argv) -> (exit status, stdout, stderr, the parser)``: the script's ``main()``
    in-process with ``sys.argv`` set; the parser is the one ``main()`` parsed its arguments with."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    threads = torch.get_num_threads()
    parsers: list[argparse.ArgumentParser] = []
    parse_args = argparse.ArgumentParser.parse_args

    def capture(self, *args, **kwargs):
        parsers.append(self)
        return parse_args(self, *args, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)

    def run(name: str, *argv: str):
        spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, module)
        spec.loader.exec_module(module)
        monkeypatch.setattr(sys, "argv", [f"{name}.py", *argv])
        parsers.clear()
        code = 0
        try:
            module.main()
        except SystemExit as exit_:
            code = 0 if exit_.code is None else exit_.code
        finally:
            torch.set_num_threads(threads)  # the scripts set it: leave the session as it was
        captured = capsys.readouterr()
        return code, captured.out, captured.err, (parsers[0] if parsers else None)

    return run


def _dataset_action(parser: argparse.ArgumentParser) -> argparse.Action:
    return next(a for a in parser._actions if {"--dataset", "--datasets"} & set(a.option_strings))


def _option_help(text: str, option: str) -> str:
    """The help of ``option`` in ``--help``'s output (whitespace normalised): after its last mention,
    up to the next option."""
    tail = text[text.rindex(option) + len(option):]
    return re.split(r" -{1,2}[a-zA-Z]", tail, maxsplit=1)[0]


def test_the_glob_finds_every_script():
    known = {"audit_cora", "blogcatalog_ppr", "caribou_oracle_bound", "chains_caribou", "cora_caribou", "cora_gcon",
             "cora_ml_gcon", "cora_privge", "cora_privge_random_features", "demo", "distributed_caribou",
             "link_prediction", "progap_cora", "pyg_gcn_to_private", "pyg_node_private_opacus"}
    assert known <= set(SCRIPTS)
    assert not {"example_data", "example_io", "example_protocol", "gcon_common", "caribou_common",
                "link_anchors"} & set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_lists_the_common_options(run_script, script):
    code, out, err, parser = run_script(script, "--help")
    assert code == 0, err
    text = " ".join(out.split())
    assert re.search(r"--datasets?\b", text), f"{script}: no --dataset in --help"
    for option in ("--quick", "--threads", "--out"):
        assert re.search(rf"{option}\b", text), f"{script}: no {option} in --help"
    threads = _option_help(text, "--threads")
    assert re.search(r"default:? 1\b", threads), f"{script}: --help does not state --threads' default 1: {threads!r}"
    action = next(a for a in parser._actions if "--threads" in a.option_strings)
    assert action.default == 1, f"{script}: --threads defaults to {action.default!r}"


def _reads_files(name: str) -> bool | None:
    """Whether ``example_data`` loads ``name`` from files (None: a name ``example_data`` does not know)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import example_data
    finally:
        sys.path.remove(str(EXAMPLES))
    try:
        return example_data.spec(name).collection not in ("Chain", "extra")
    except ValueError:
        return None


def _accepts(action: argparse.Action, value: str) -> bool:
    try:
        value = action.type(value) if action.type is not None else value
    except (argparse.ArgumentTypeError, TypeError, ValueError):
        return False
    return action.choices is None or value in action.choices


def _no_data_argv(parser: argparse.ArgumentParser) -> list[str] | None:
    """The arguments of a run that must fail for want of files (None: the script reads none)."""
    action = _dataset_action(parser)
    defaults = action.default if isinstance(action.default, (list, tuple)) else [action.default]
    reads = [_reads_files(str(name)) for name in defaults]
    if all(reads):
        return []
    if _accepts(action, "Cora"):
        return [action.option_strings[0], "Cora"]
    if _accepts(action, "TU/MUTAG"):  # a graph-classification script: an offline TU dataset
        return [action.option_strings[0], "TU/MUTAG"]
    if None in reads:
        return []  # names of the script's own: taken to be read from files
    return None


@pytest.mark.parametrize("script", SCRIPTS)
def test_no_data_is_one_clean_line_and_status_2(run_script, script, tmp_path, monkeypatch):
    _, _, _, parser = run_script(script, "--help")
    argv = _no_data_argv(parser)
    if argv is None:
        pytest.skip(f"{script} generates its data and takes no dataset read from files")
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PYG_PRIVATE_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("PYG_PRIVATE_CACHE", str(tmp_path / "cache"))
    code, out, err, _ = run_script(script, *argv, "--out", str(tmp_path / "out"))
    assert "Traceback" not in out + err
    assert code == 2, f"{script} {' '.join(argv)}: exit status {code}\n{err[-2000:]}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"{script}: {len(lines)} lines on stderr:\n{err[-2000:]}"
    assert "error:" in lines[0] and "PYG_PRIVATE_DATA" in lines[0] and "download" in lines[0], lines[0]
    assert not (tmp_path / "cache").exists()  # nothing downloaded or copied


def test_no_data_in_a_fresh_interpreter(tmp_path):
    """One script as a user runs it: exit status 2, one line on stderr, no traceback."""
    (tmp_path / "empty").mkdir()
    env = {**os.environ, "PYG_PRIVATE_DATA": str(tmp_path / "empty"), "PYG_PRIVATE_CACHE": str(tmp_path / "cache"),
           "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(EXAMPLES / "caribou_oracle_bound.py"), "--quick", "--out",
                           str(tmp_path / "out")], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("caribou_oracle_bound.py: error: Cora (Planetoid) is not "
                                                   "available offline"), done.stderr
