"""pyg_private: differentially private graph learning for PyTorch Geometric.

One :class:`PrivacyAccountant` records what every private layer, transform and
mechanism of this package releases, per unit of protection (``"edge"``, ``"node"``,
``"local"``).
"""
from .accounting import PrivacyAccountant, PrivacyBudgetExceeded, PrivacyEvent, Unit

__version__ = "0.2.0"

__all__ = ["PrivacyAccountant", "PrivacyBudgetExceeded", "PrivacyEvent", "Unit", "__version__"]
