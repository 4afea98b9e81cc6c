"""Install ``torch==VERSION`` into the environment of the interpreter that runs this script, choosing
the build by the machine (standard library only; the Makefile calls it with the venv's python).

    python .ci/install_torch.py VERSION [--cpu-index URL]

1. An NVIDIA GPU (``nvidia-smi -L`` lists one): ``torch==VERSION`` as pip's configuration gives it
   (on Linux x86_64 PyPI's CUDA build, the one such a machine wants).
2. Otherwise pip is asked first what its configuration would install (``pip install --dry-run
   --report -``; metadata only). With no ``nvidia-*`` package in that report it is a CPU build
   already (PyPI's macOS and Windows wheels, a local wheel of the CPU build): installed that way,
   with no other host contacted.
3. Otherwise, when ``--cpu-index`` is a URL (the Makefile's ``TORCH_CPU_INDEX``, by default
   PyTorch's CPU index) and answers one request within a few seconds: torch from it (``--no-deps``),
   then torch's own dependencies as pip's configuration gives them.
4. Otherwise: as pip's configuration gives it, after a warning that a CUDA build of several GB is
   being installed and how to avoid it.

An installed ``torch==VERSION`` is left as it is. The exit status is pip's.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Callable, List, Optional, Sequence

#: What the Makefile passes when ``TORCH_CPU_INDEX`` is not set.
DEFAULT_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT_S = 5.0


def log(message: str) -> None:
    print(f"install_torch: {message}", flush=True)


def pip_command(*args: str) -> List[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


def installed_torch_version() -> Optional[str]:
    """The installed torch's version (with its local label, e.g. ``2.13.0+cpu``), or None."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def same_release(installed: Optional[str], wanted: str) -> bool:
    """``2.13.0+cpu`` is ``torch==2.13.0`` (a local label does not change the release)."""
    return installed is not None and installed.split("+", 1)[0] == wanted


def nvidia_gpus(run: Callable = subprocess.run) -> List[str]:
    """The lines of ``nvidia-smi -L`` that name a GPU; empty where there is no such tool or GPU."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        done = run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("GPU ")]


def dry_run_packages(requirement: str, run: Callable = subprocess.run) -> Optional[List[str]]:
    """The names of what pip's configuration would install for ``requirement`` (lower case), or
    None when pip could not tell (no ``--report`` in this pip, no index, a bad version...)."""
    cmd = pip_command("install", "--dry-run", "--quiet", "--ignore-installed", "--report", "-", requirement)
    try:
        done = run(cmd, capture_output=True, text=True)
    except (OSError, subprocess.SubprocessError) as error:
        log(f"the dry run could not start ({error})")
        return None
    if done.returncode != 0:
        log("the dry run failed: " + (done.stderr.strip().splitlines() or ["(no message)"])[-1])
        return None
    # pip may print notices before the report; the report is the one JSON object
    start = done.stdout.find("{")
    try:
        report = json.loads(done.stdout[start:]) if start >= 0 else None
        items = report["install"]
        return [str(item["metadata"]["name"]).lower() for item in items]
    except (ValueError, KeyError, TypeError):
        log("the dry run's report could not be read")
        return None


def is_cuda_build(packages: Sequence[str]) -> bool:
    """Whether a resolution pulls NVIDIA's CUDA libraries (``nvidia-*`` packages)."""
    return any(re.match(r"nvidia[-_.]", name) for name in packages)


def index_reachable(url: str, timeout: float = PROBE_TIMEOUT_S,
                    urlopen: Callable = urllib.request.urlopen) -> bool:
    """One request (HEAD) to the index's torch page, answered within ``timeout`` seconds."""
    page = url.rstrip("/") + "/torch/"
    try:
        with urlopen(urllib.request.Request(page, method="HEAD"), timeout=timeout) as response:
            return 200 <= getattr(response, "status", 200) < 400
    except (urllib.error.URLError, OSError, ValueError):
        return False


def plan(version: str, cpu_index: str, *, gpus: Callable[[], List[str]],
         dry_run: Callable[[str], Optional[List[str]]],
         reachable: Callable[[str], bool]) -> tuple[str, List[List[str]], str]:
    """``(path, pip argument lists, message)``: what to run, decided as the module says. ``path``
    is ``"gpu"``, ``"configured-cpu"``, ``"cpu-index"``, ``"configured-cuda"`` or ``"configured"``
    (pip could not tell what it would install)."""
    requirement = f"torch=={version}"
    found = gpus()
    if found:
        return ("gpu", [["install", requirement]],
                f"NVIDIA GPU found ({found[0]}): {requirement} as pip's configuration gives it "
                "(on Linux x86_64 PyPI's CUDA build)")
    packages = dry_run(requirement)
    if packages is None:
        return ("configured", [["install", requirement]],
                f"no GPU; pip could not tell which build of {requirement} it would take: "
                "installing it as configured")
    if not is_cuda_build(packages):
        return ("configured-cpu", [["install", requirement]],
                f"no GPU; pip's configuration gives a CPU build of {requirement} (no nvidia-* "
                "package in its dry run): installing it")
    if cpu_index and reachable(cpu_index):
        return ("cpu-index", [["install", "--no-deps", "--index-url", cpu_index, requirement],
                              ["install", requirement]],
                f"no GPU; pip's configuration gives a CUDA build: {requirement} from the CPU index "
                f"{cpu_index}, then its dependencies as configured")
    why = (f"the CPU index {cpu_index} did not answer" if cpu_index
           else "no CPU index is set (TORCH_CPU_INDEX is empty)")
    nvidia = sum(1 for name in packages if is_cuda_build([name]))
    return ("configured-cuda", [["install", requirement]],
            f"WARNING: no GPU on this machine, but pip's configuration gives a CUDA build of "
            f"{requirement} ({nvidia} nvidia-* package{'' if nvidia == 1 else 's'}, several GB to download, 4-7 GB on "
            f"disk; it runs on the CPU too) and {why}. To get the CPU build (under 1 GB) instead, "
            f"set TORCH_CPU_INDEX to a reachable index of PyTorch's CPU wheels (by default "
            f"{DEFAULT_CPU_INDEX}), e.g. `make test TORCH_CPU_INDEX={DEFAULT_CPU_INDEX}`, or "
            f"install torch=={version} (CPU build) into the venv yourself before running make.")


def main(argv: Optional[Sequence[str]] = None, run: Callable = subprocess.run) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("version", help="the torch release, e.g. 2.13.0")
    parser.add_argument("--cpu-index", default=DEFAULT_CPU_INDEX,
                        help="index of PyTorch's CPU wheels, tried only when pip's configuration "
                             "gives a CUDA build on a machine without a GPU; empty: never")
    args = parser.parse_args(argv)

    installed = installed_torch_version()
    if same_release(installed, args.version):
        log(f"torch {installed} is installed already")
        return 0
    path, steps, message = plan(args.version, args.cpu_index.strip(),
                                gpus=lambda: nvidia_gpus(run),
                                dry_run=lambda requirement: dry_run_packages(requirement, run),
                                reachable=index_reachable)
    log(message)
    for step in steps:
        cmd = pip_command(*step)
        log("$ " + " ".join(cmd[1:]))
        code = run(cmd).returncode
        if code != 0:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
