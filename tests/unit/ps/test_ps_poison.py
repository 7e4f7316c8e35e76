"""Compounding poison (issue #36, 3): a device with a valid session pushes 0.9 × the PS's bound, push
after push, into one entry. The bound must not grow with the poison, the divergence must be seen while
Θ is still finite, the device that caused it named and refused, and refusals must not tell the bound."""
from __future__ import annotations

import numpy as np

from edgebed import wire
from tests.unit.ps.test_ps_robustness import call, join, make_ps

HONEST, POISONER = 0, 1


def _attack(ps, pushes: int = 3000) -> tuple[int, float]:
    """The honest device pushes small gradients, the poisoner 0.9 × the bound into entry 0 (it knows
    the bound: the PS's own formula); → (poison pushes applied, largest ‖Θ‖∞ seen)."""
    honest, bad = join(ps, HONEST), join(ps, POISONER)
    rng = np.random.default_rng(0)
    applied, worst = 0, 0.0
    for i in range(pushes):
        if ps.stopped:
            break
        g = rng.normal(0, 0.05, 4).astype(np.float32)
        call(ps, wire.Push(honest, i, ps.version, g, np.array([3, 7, 11, 20], np.uint32), 0.1))
        reply = call(ps, wire.Push(bad, i, ps.version, np.array([min(0.9 * ps.value_limit(), 3e38)], np.float32),
                                   np.array([0], np.uint32), 0.1))
        applied += isinstance(reply, wire.Ack) and reply.applied
        worst = max(worst, float(np.abs(ps.theta).max()))
    return applied, worst


def test_poison_cannot_raise_the_bound_and_the_run_fails_as_diverged_naming_the_poisoner():
    ps = make_ps("asgd")
    bound = ps.value_limit()
    applied, worst = _attack(ps)
    assert ps.value_limit() == bound, "the bound moved with the poison"
    assert np.isfinite(ps.theta).all() and worst < 1e5, worst   # seen long before ±Inf (was 1e34)
    assert ps.failure is not None and ps.failure.startswith("diverged:"), ps.failure
    assert f"device {POISONER}" in ps.failure and f"device {HONEST} " not in ps.failure, ps.failure
    assert ps.stopped and applied < 100, applied
    # refused from then on, even in a new session
    reply = call(ps, wire.Hello(POISONER, "c", 1))
    assert isinstance(reply, wire.Error) and reply.code == "excluded", reply


def test_on_divergence_exclude_continues_without_the_poisoner_on_the_last_sound_model():
    ps = make_ps("asgd", on_divergence="exclude")
    theta0 = ps.theta.copy()
    _attack(ps, pushes=400)
    assert ps.failure is None and not ps.stopped
    assert float(np.abs(ps.theta).max()) <= 2 * float(np.abs(theta0).max()), ps.theta[:4]
    excluded = [r for r in ps.errors] and ps.errors.get("excluded", 0)
    assert excluded >= 1, ps.errors   # the poisoner's later pushes were refused
    assert ps.version > 300   # the honest device went on


def test_an_out_of_bounds_refusal_does_not_tell_the_bound():
    ps = make_ps("asgd")
    s = join(ps)
    limit = ps.value_limit()
    reply = call(ps, wire.Push(s, 0, 0, np.array([3 * limit], np.float32), np.array([0], np.uint32), 0.1))
    assert isinstance(reply, wire.Error) and reply.code == "bad-payload", reply
    assert "out of bounds" in reply.message
    assert f"{limit:.3g}" not in reply.message and f"{limit:g}" not in reply.message, reply.message
    assert not any(ch.isdigit() for ch in reply.message), reply.message
