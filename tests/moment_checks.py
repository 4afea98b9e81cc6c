"""Monte Carlo moment checks shared by the mechanism and transform tests (imported by name:
pytest puts this directory on ``sys.path`` for its ``conftest.py``)."""
import math

import torch


def mean_var_checks(samples: torch.Tensor, mean: float, var: float, z: float = 5.0) -> None:
    """Sample mean and variance within z standard errors (the variance's error from the
    sample's own fourth central moment)."""
    n = samples.numel()
    m = float(samples.mean())
    c = samples - m
    v = float((c * c).mean())
    m4 = float((c**4).mean())
    assert abs(m - mean) <= z * math.sqrt(var / n), (m, mean)
    assert abs(v - var) <= z * math.sqrt(max(m4 - v * v, 1e-30) / n), (v, var)
