"""Exceptions and warnings raised by the privacy accounting."""


class PrivacyBudgetExceeded(RuntimeError):
    """A release would push a unit past its privacy budget.

    Raised by :meth:`PrivacyAccountant.register` **before** the mechanism draws
    any noise; the ledger is left exactly as it was and nothing is released.
    """


class UntrackedPrivacyWarning(UserWarning):
    """A noisy component ran without an accountant, so its cost is not recorded."""
