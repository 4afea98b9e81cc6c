"""Privacy accounting: units, events, curves, composition, calibration and the accountant.

The DP-SGD bridge to Opacus (:class:`OpacusAccountant`, :func:`make_private`,
:func:`make_private_with_epsilon`, :func:`dp_sgd_noise_multiplier`, :func:`check_opacus_model`,
:class:`ReleaseInsideDPSGDError`) is resolved on first access (PEP 562): its modules import Opacus,
about a second, which a user who never trains with DP-SGD does not pay. The first access also
registers this library's accounting in Opacus' accountant registry (``accountant="pyg_private"``).
"""
import importlib

from .accountant import DEFAULT_REPORT_DELTA, PrivacyAccountant
from .budget_calibration import check_plan, largest_affordable_epsilon, scratch_copy
from .calibration import calibrate_noise
from .composition import Composition, compose
from .conversion import rdp_to_dp
from .errors import LedgerProcessError, PrivacyBudgetExceeded, UntrackedPrivacyWarning
from .events import PrivacyEvent
from .gdp import gdp_delta, gdp_epsilon, gdp_mu, gdp_rdp
from .laplace import laplace_rdp, laplace_rdp_ratio
from .mechanism_events import (
    approximate_dp_event,
    gaussian_event,
    gdp_event,
    laplace_event,
    objective_perturbation_event,
    randomized_response_event,
    rdp_event,
    subsampled_gaussian_event,
)
from .parallel import OverlappingPartsError, ParallelScope, UncheckedPartitionWarning
from .persistent_ledger import PersistentPrivacyAccountant
from .orders import DEFAULT_ORDERS, check_orders
from .contractive import (
    contraction_factor,
    contractive_epsilon,
    contractive_mu,
    contractive_noise_multiplier,
    edge_sensitivity,
    node_sensitivity,
)
from .push_flow import push_flow_noise_scale, push_flow_rdp, push_flow_sensitivity
from .pabi import (
    diffusion_distortion,
    lazy_ppr_epsilon,
    lazy_ppr_noise_scale,
    lazy_ppr_rdp,
    noisy_diffusion_rdp,
)
from .randomized_response import (
    calibrated_truth_probability,
    randomized_response_rdp,
    resolve_truth_probability,
    truth_probability,
)
from .report import AccountantReport
from .subsampled_gaussian import subsampled_gaussian_rdp
from .tracking import charge
from .units import Unit, as_unit
from .objective_perturbation import (
    GCON_LOSSES,
    ObjectivePerturbationCalibration,
    appr_sensitivity,
    calibrate_objective_perturbation,
    loss_constants,
    objective_perturbation_profile,
)

__all__ = [
    "ReleaseInsideDPSGDError",
    "MessagePassingInDPSGDError",
    "check_opacus_model",
    "dp_sgd_noise_multiplier",
    "make_private",
    "make_private_with_epsilon",
    "ParallelScope",
    # the accountant
    "PrivacyAccountant",
    "PersistentPrivacyAccountant",
    "LedgerProcessError",
    "OverlappingPartsError",
    "UncheckedPartitionWarning",
    "PrivacyBudgetExceeded",
    "UntrackedPrivacyWarning",
    "AccountantReport",
    "DEFAULT_REPORT_DELTA",
    "OpacusAccountant",
    "charge",
    # units and events
    "Unit",
    "as_unit",
    "PrivacyEvent",
    "gaussian_event",
    "laplace_event",
    "randomized_response_event",
    "subsampled_gaussian_event",
    "approximate_dp_event",
    "gdp_event",
    "rdp_event",
    "objective_perturbation_event",
    # composition and conversion
    "Composition",
    "compose",
    "rdp_to_dp",
    "DEFAULT_ORDERS",
    "check_orders",
    # curves
    "gdp_delta",
    "gdp_epsilon",
    "gdp_mu",
    "gdp_rdp",
    "laplace_rdp",
    "laplace_rdp_ratio",
    "noisy_diffusion_rdp",
    "lazy_ppr_rdp",
    "diffusion_distortion",
    "randomized_response_rdp",
    "calibrated_truth_probability",
    "resolve_truth_probability",
    "push_flow_sensitivity",
    "contraction_factor",
    "edge_sensitivity",
    "node_sensitivity",
    "contractive_mu",
    "contractive_epsilon",
    "contractive_noise_multiplier",
    "push_flow_rdp",
    "push_flow_noise_scale",
    "truth_probability",
    "subsampled_gaussian_rdp",
    # calibration
    "calibrate_noise",
    "largest_affordable_epsilon",
    "check_plan",
    "scratch_copy",
    "lazy_ppr_epsilon",
    "lazy_ppr_noise_scale",
    # GCON objective perturbation
    "GCON_LOSSES",
    "loss_constants",
    "appr_sensitivity",
    "ObjectivePerturbationCalibration",
    "calibrate_objective_perturbation",
    "objective_perturbation_profile",
]
from .hyperparameter_tuning import (Poisson, TruncatedNegativeBinomial, expected_trials,  # noqa: E402
                                    tuning_event, tuning_rdp)

__all__ += ["TruncatedNegativeBinomial", "Poisson", "expected_trials", "tuning_event", "tuning_rdp"]

#: Names resolved on first access, and the module that defines each (both import Opacus).
_LAZY = {
    "OpacusAccountant": "opacus_bridge",
    "make_private": "opacus_bridge",
    "make_private_with_epsilon": "opacus_bridge",
    "dp_sgd_noise_multiplier": "opacus_bridge",
    "ReleaseInsideDPSGDError": "opacus_checks",
    "MessagePassingInDPSGDError": "opacus_checks",
    "check_opacus_model": "opacus_checks",
    "opacus_bridge": "opacus_bridge",
    "opacus_checks": "opacus_checks",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    loaded = importlib.import_module(f".{module}", __name__)
    value = loaded if name == module else getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
