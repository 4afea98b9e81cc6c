"""Exceptions and warnings raised by the privacy accounting."""


class PrivacyBudgetExceeded(RuntimeError):
    """A release would push a unit past its privacy budget.

    Raised by :meth:`PrivacyAccountant.register` **before** the mechanism draws
    any noise; the ledger is left exactly as it was and nothing is released.
    """


class UntrackedPrivacyWarning(UserWarning):
    """A noisy component ran without an accountant, so its cost is not recorded."""


class LedgerProcessError(RuntimeError):
    """A release would be charged to an in-memory ledger in a process that does not own it.

    Raised by :meth:`PrivacyAccountant.register` and :meth:`~PrivacyAccountant.check`
    **before** any noise is drawn, in a forked child, a ``DataLoader`` worker, a spawned
    process or a ``torch.distributed`` rank other than 0: a copy's events would never reach
    the owner's ledger. Share one ledger across processes with
    :class:`~pyg_private.accounting.PersistentPrivacyAccountant`, or release in the owning
    process.
    """
