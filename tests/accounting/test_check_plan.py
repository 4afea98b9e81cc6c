"""check_plan tries a run's planned events on a scratch copy: the real ledger (plain or persistent) is never
charged by the check, and a plan over budget is refused before anything is charged."""
import pytest

from pyg_private import PrivacyAccountant, PrivacyBudgetExceeded
from pyg_private.accounting import check_plan, laplace_event
from pyg_private.accounting.persistent_ledger import PersistentPrivacyAccountant

PLAN = [laplace_event(unit="edge", sensitivity=2.0, scale=2.0, name=f"release_{k}") for k in range(3)]  # 1 each


@pytest.mark.parametrize("kind", ["plain", "persistent"])
def test_the_check_charges_nothing_and_refuses_a_plan_over_budget(kind, tmp_path):
    budget = {"edge": (2.5, 1e-5)}
    acct = PrivacyAccountant(budget=budget) if kind == "plain" else \
        PersistentPrivacyAccountant(tmp_path / "ledger.db", budget=budget)
    check_plan(acct, PLAN[:2])  # 2 <= 2.5
    assert len(acct.events) == 0
    with pytest.raises(PrivacyBudgetExceeded):
        check_plan(acct, PLAN)  # 3 > 2.5
    assert len(acct.events) == 0
    if kind == "persistent":  # the file itself holds nothing either
        assert len(PersistentPrivacyAccountant(tmp_path / "ledger.db").events) == 0


def test_without_a_budget_there_is_nothing_to_check():
    acct = PrivacyAccountant()
    check_plan(acct, PLAN * 10)
    assert len(acct.events) == 0
