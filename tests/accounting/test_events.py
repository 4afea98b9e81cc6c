"""One contract every event type passes: frozen, validated, persistable, composable."""
import dataclasses
import math

import numpy as np
import pytest

from pyg_private.accounting import (
    Composition,
    PrivacyEvent,
    approximate_dp_event,
    compose,
    gaussian_event,
    gdp_event,
    laplace_event,
    randomized_response_event,
    rdp_event,
    subsampled_gaussian_event,
)

FACTORIES = {
    "gaussian": lambda: gaussian_event(unit="edge", sensitivity=1.0, noise_std=2.0),
    "laplace": lambda: laplace_event(unit="edge", sensitivity=1.0, scale=2.0),
    "laplace-local": lambda: laplace_event(unit="local", sensitivity=1.0, scale=2.0, nodes=[1, 4], num_nodes=9),
    "rr": lambda: randomized_response_event(unit="edge", epsilon=1.0),
    "rr-flip": lambda: randomized_response_event(unit="edge", flip_probability=0.3),
    "dp-sgd": lambda: subsampled_gaussian_event(noise_multiplier=1.0, sample_rate=0.05, steps=20),
    "dp-sgd-full-batch": lambda: subsampled_gaussian_event(noise_multiplier=2.0, sample_rate=1.0, steps=4),
    "approx": lambda: approximate_dp_event(unit="edge", epsilon=0.7, delta=1e-7),
    "gdp": lambda: gdp_event(unit="node", mu=0.3, name="chain"),
    "rdp": lambda: rdp_event(unit="edge", orders=(2.0, 8.0, math.inf), rdp=(0.01, 0.04, 0.1), name="pabi"),
}


@pytest.fixture(params=sorted(FACTORIES))
def event(request):
    return FACTORIES[request.param]()


def test_events_are_frozen(event):
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.name = "changed"
    with pytest.raises(TypeError):
        event.params["new"] = 1
    if event.nodes is not None:
        with pytest.raises(ValueError):
            event.nodes[0] = 3


def test_events_round_trip(event):
    again = PrivacyEvent.from_dict(event.to_dict())
    assert again == event
    assert repr(again) == repr(event)


def test_epsilon_is_non_negative_and_falls_with_delta(event):
    if event.unit.value == "local":
        pytest.skip("local events are composed per node")
    comp = compose([event])
    eps = [comp.epsilon(d) for d in (1e-6, 1e-4, 1e-2)]
    assert all(e >= 0 for e in eps)
    assert eps[0] >= eps[1] >= eps[2]


def test_composition_is_immutable(event):
    if event.unit.value == "local":
        pytest.skip("local events are composed per node")
    base = Composition()
    after = base.add(event)
    assert base.num_events == 0 and after.num_events == 1


def test_representation_priority():
    both = subsampled_gaussian_event(noise_multiplier=2.0, sample_rate=1.0, steps=4)
    assert both.representation == "gdp" and both.mu == pytest.approx(1.0)
    assert laplace_event(unit="edge", sensitivity=1, scale=1).representation == "rdp"
    assert approximate_dp_event(unit="edge", epsilon=1, delta=0).representation == "approx"


def test_event_validation():
    with pytest.raises(ValueError, match="at least one"):
        PrivacyEvent(name="x", unit="edge", mechanism="m")
    with pytest.raises(ValueError, match="together"):
        PrivacyEvent(name="x", unit="edge", mechanism="m", orders=(2.0,))
    with pytest.raises(ValueError, match="non-negative"):
        PrivacyEvent(name="x", unit="edge", mechanism="m", orders=(2.0,), rdp=(float("nan"),))
    with pytest.raises(ValueError, match="strictly increasing"):
        PrivacyEvent(name="x", unit="edge", mechanism="m", orders=(3.0, 2.0), rdp=(0.1, 0.1))
    with pytest.raises(ValueError, match="num_nodes"):
        PrivacyEvent(name="x", unit="local", mechanism="m", mu=1.0)
    with pytest.raises(ValueError, match="per-node"):
        PrivacyEvent(name="x", unit="edge", mechanism="m", mu=1.0, nodes=np.array([0]), num_nodes=3)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        PrivacyEvent(name="x", unit="local", mechanism="m", mu=1.0, nodes=np.array([5]), num_nodes=3)
    with pytest.raises(TypeError, match="params"):
        PrivacyEvent(name="x", unit="edge", mechanism="m", mu=1.0, params={"t": object()})
    with pytest.raises(ValueError, match="non-empty"):
        PrivacyEvent(name="", unit="edge", mechanism="m", mu=1.0)
