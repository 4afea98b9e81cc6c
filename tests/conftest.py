"""Suite-wide settings: derandomized property tests (reproducible CI runs) and one torch thread."""
import pytest
import torch
from hypothesis import settings

settings.register_profile("pyg_private", derandomize=True, deadline=None, database=None, print_blob=True)
settings.load_profile("pyg_private")


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Run the suite on one torch thread: its graphs are tiny, and on a loaded 2-core machine
    torch's default pool stalls every small sparse product by a scheduler quantum (~8 ms
    instead of microseconds)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
