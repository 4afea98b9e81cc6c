"""Suite-wide settings: derandomized property tests (reproducible CI runs), one torch thread, and
the pytest-xdist options of ``addopts`` accepted (and ignored) where that plugin is absent or disabled."""
import pytest
import torch
from hypothesis import settings

settings.register_profile("pyg_private", derandomize=True, deadline=None, database=None, print_blob=True)
settings.load_profile("pyg_private")


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """``addopts`` (setup.cfg) asks pytest-xdist for workers (``--numprocesses=auto --maxprocesses=8
    --dist=loadfile``). Without the plugin (not installed, or ``-p no:xdist``) pytest would refuse
    these options; they are declared here instead, and the suite runs in this one process. (Only
    the long forms: pytest reserves lowercase short options such as ``-n`` for itself.)"""
    if pluginmanager.has_plugin("xdist"):
        return
    group = parser.getgroup("xdist", "pytest-xdist (absent or disabled: these options are ignored)")
    group.addoption("--numprocesses", dest="numprocesses", default=None, metavar="numprocesses",
                    help="ignored: pytest-xdist is absent or disabled")
    group.addoption("--maxprocesses", dest="maxprocesses", default=None, metavar="maxprocesses",
                    help="ignored: pytest-xdist is absent or disabled")
    group.addoption("--dist", dest="dist", default="no", metavar="distmode",
                    help="ignored: pytest-xdist is absent or disabled")


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Run the suite on one torch thread: its graphs are tiny, and on a loaded 2-core machine
    torch's default pool stalls every small sparse product by a scheduler quantum (~8 ms
    instead of microseconds)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_configure(config: pytest.Config) -> None:
    """pytest-xdist's controller rebuilds each warning a worker reports by importing the module of
    its class, in one thread per worker. Two such first imports at once of modules that need PyG can
    meet inside torch_geometric's circular imports and fail with "partially initialized module"
    (CPython does not make a submodule's import wait for a parent package that another thread is
    still initialising); importing the package no longer loads PyG, so nothing did it before. The
    controller imports the package's subpackages (and PyG with them) here, in one thread."""
    if (config.pluginmanager.has_plugin("xdist") and getattr(config.option, "numprocesses", None)
            and not hasattr(config, "workerinput")):
        import importlib

        for name in ("accounting", "audit", "datasets", "distributed", "mechanisms", "metrics", "models", "nn",
                     "sampling", "transforms", "utils"):
            importlib.import_module(f"pyg_private.{name}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``cuda`` are skipped, with the reason, on a machine without a CUDA device."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
