"""The decisions of ``.ci/install_torch.py`` (which torch build the Makefile installs), with pip,
``nvidia-smi`` and the index mocked: no network but one HTTP server on 127.0.0.1."""
from __future__ import annotations

import http.server
import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "install_torch.py"


@pytest.fixture(scope="module")
def it():
    spec = importlib.util.spec_from_file_location("install_torch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def never(*args, **kwargs):
    raise AssertionError("must not be called")


CPU = ["torch", "filelock", "sympy", "networkx", "jinja2", "fsspec", "typing-extensions"]
CUDA = CPU + ["nvidia-cublas-cu12", "nvidia-cudnn-cu12", "triton"]


def test_gpu_machine_takes_the_configured_build(it):
    path, steps, message = it.plan("2.13.0", it.DEFAULT_CPU_INDEX, gpus=lambda: ["GPU 0: NVIDIA H100"],
                                   dry_run=never, reachable=never)
    assert path == "gpu" and steps == [["install", "torch==2.13.0"]] and "NVIDIA GPU found" in message


def test_configured_cpu_build_is_installed_as_it_is(it):
    asked = []
    path, steps, _ = it.plan("2.13.0", it.DEFAULT_CPU_INDEX, gpus=lambda: [],
                             dry_run=lambda req: asked.append(req) or CPU, reachable=never)
    assert asked == ["torch==2.13.0"]  # one dry run, and no request to the CPU index
    assert path == "configured-cpu" and steps == [["install", "torch==2.13.0"]]


def test_cuda_build_without_gpu_takes_the_cpu_index(it):
    index = "http://127.0.0.1:1/simple"
    path, steps, _ = it.plan("2.11.0", index, gpus=lambda: [], dry_run=lambda req: CUDA,
                             reachable=lambda url: url == index)
    assert path == "cpu-index"
    assert steps == [["install", "--no-deps", "--index-url", index, "torch==2.11.0"],  # torch alone from the index
                     ["install", "torch==2.11.0"]]  # then its dependencies as configured


@pytest.mark.parametrize("index", ["", "http://127.0.0.1:1/simple"])
def test_cuda_build_is_the_fallback_with_a_warning(it, index):
    reachable = never if not index else (lambda url: False)
    path, steps, message = it.plan("2.11.0", index, gpus=lambda: [], dry_run=lambda req: CUDA, reachable=reachable)
    assert path == "configured-cuda" and steps == [["install", "torch==2.11.0"]]
    assert message.startswith("WARNING") and "several GB" in message and "TORCH_CPU_INDEX" in message
    assert ("TORCH_CPU_INDEX is empty" in message) == (not index) and "2 nvidia-* packages" in message


def test_unknown_resolution_installs_as_configured(it):
    path, steps, _ = it.plan("2.13.0", it.DEFAULT_CPU_INDEX, gpus=lambda: [], dry_run=lambda req: None,
                             reachable=never)
    assert path == "configured" and steps == [["install", "torch==2.13.0"]]


def test_cuda_build_is_told_by_nvidia_packages(it):
    assert it.is_cuda_build(["torch", "nvidia-nccl-cu13"]) and it.is_cuda_build(["nvidia_cublas"])
    assert not it.is_cuda_build(CPU) and not it.is_cuda_build(["nvidiafoo", "triton"])


def test_nvidia_smi(it, monkeypatch):
    monkeypatch.setattr(it.shutil, "which", lambda name: None)
    assert it.nvidia_gpus(run=never) == []  # no tool: not run
    monkeypatch.setattr(it.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    listing = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n  MIG 1g.10gb Device 0: (UUID: MIG-2)\n"
    assert it.nvidia_gpus(run=lambda cmd, **kw: SimpleNamespace(returncode=0, stdout=listing)) == [
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"]
    failed = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
    assert it.nvidia_gpus(run=lambda cmd, **kw: SimpleNamespace(returncode=9, stdout=failed)) == []
    assert it.nvidia_gpus(run=lambda cmd, **kw: SimpleNamespace(returncode=0, stdout="No devices found.\n")) == []

    def hangs(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw.get("timeout"))
    assert it.nvidia_gpus(run=hangs) == []


def _report(names):
    return json.dumps({"version": "1", "install": [{"metadata": {"name": n, "version": "1"}} for n in names]})


def test_dry_run_report(it):
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        return SimpleNamespace(returncode=0, stdout="notice before the report\n" + _report(["torch", "nvidia-cublas"]),
                               stderr="")
    assert it.dry_run_packages("torch==2.11.0", run=run) == ["torch", "nvidia-cublas"]
    cmd = calls[0]
    assert cmd[:3] == [sys.executable, "-m", "pip"] and cmd[-1] == "torch==2.11.0"
    assert {"--dry-run", "--ignore-installed", "--report"} <= set(cmd) and cmd[cmd.index("--report") + 1] == "-"
    no_pip = SimpleNamespace(returncode=2, stdout="", stderr="no such option: --report\n")
    assert it.dry_run_packages("torch==2.11.0", run=lambda cmd, **kw: no_pip) is None
    garbled = SimpleNamespace(returncode=0, stdout="{not json", stderr="")
    assert it.dry_run_packages("torch==2.11.0", run=lambda cmd, **kw: garbled) is None


def test_index_probe_on_loopback(it):
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802
            seen.append(self.path)
            self.send_response(200 if self.path == "/whl/cpu/torch/" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        assert it.index_reachable(f"http://127.0.0.1:{port}/whl/cpu/", timeout=5)
        assert not it.index_reachable(f"http://127.0.0.1:{port}/elsewhere", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert seen == ["/whl/cpu/torch/", "/elsewhere/torch/"]
    assert not it.index_reachable(f"http://127.0.0.1:{port}/whl/cpu", timeout=5)  # closed port
    assert not it.index_reachable("not a url", timeout=5)


def test_main_runs_the_plan(it, monkeypatch, capsys):
    monkeypatch.setattr(it, "installed_torch_version", lambda: None)
    monkeypatch.setattr(it, "nvidia_gpus", lambda run: [])
    monkeypatch.setattr(it, "dry_run_packages", lambda req, run: CUDA)
    monkeypatch.setattr(it, "index_reachable", lambda url: True)
    calls = []
    code = it.main(["2.11.0", "--cpu-index", "http://127.0.0.1:1/cpu"],
                   run=lambda cmd, **kw: calls.append(cmd) or SimpleNamespace(returncode=0))
    assert code == 0 and [c[4:] for c in calls] == [  # after python -m pip --disable-pip-version-check
        ["install", "--no-deps", "--index-url", "http://127.0.0.1:1/cpu", "torch==2.11.0"], ["install", "torch==2.11.0"]]
    assert "from the CPU index" in capsys.readouterr().out

    calls.clear()  # pip's failure stops the plan and is the exit status
    assert it.main(["2.11.0", "--cpu-index", "http://127.0.0.1:1/cpu"],
                   run=lambda cmd, **kw: calls.append(cmd) or SimpleNamespace(returncode=3)) == 3
    assert len(calls) == 1


def test_main_leaves_an_installed_release(it, monkeypatch):
    monkeypatch.setattr(it, "installed_torch_version", lambda: "2.13.0+cpu")
    monkeypatch.setattr(it, "nvidia_gpus", never)
    assert it.main(["2.13.0"], run=never) == 0
    assert it.same_release("2.13.0", "2.13.0") and not it.same_release("2.11.0+cu130", "2.13.0")
    assert not it.same_release(None, "2.13.0")
