"""Suite-wide settings: property tests are derandomized so CI runs are reproducible."""
from hypothesis import settings

settings.register_profile("pyg_private", derandomize=True, deadline=None, database=None, print_blob=True)
settings.load_profile("pyg_private")
