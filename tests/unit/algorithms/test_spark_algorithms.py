"""The Spark papers' algorithms: streaming averaging math, each rule's round state machine, held PS
replies, the device policies and the scenario keys — all against hand-computed examples."""
import math

import numpy as np
import pytest

from edgebed.device_agent.policies import PULL, DynamicLocal, Elastic, LocalSteps, Upload, make_policy
from edgebed import wire
from edgebed.algorithms.averaging import add_delta, apply_mean, average, easgd_exchange
from edgebed.ps.rules import RULES, DynamicAveraging, EASGD, ModelAveraging
from edgebed.ps.server import Hooks, ParameterServer, PSConfig
from edgebed.scenario import ScenarioError, parse_scenario

F32 = np.float32


def v(*xs):
    return np.array(xs, F32)


# -- math --------------------------------------------------------------------------------------------
def test_streaming_mean_of_deltas_is_the_average_of_the_models():
    theta = v(1, 1)
    models = [v(3, 1), v(1, 5), v(2, 0)]
    total = np.zeros(2)
    for m in models:
        add_delta(total, m - theta)
    assert list(total) == [3.0, 3.0]
    apply_mean(theta, total, 3)
    np.testing.assert_allclose(theta, average(models))   # (2, 2)
    np.testing.assert_allclose(theta, [2, 2])
    with pytest.raises(ValueError, match="mean of 0"):
        apply_mean(theta, total, 0)


def test_sparse_accumulate_and_add_delta():
    total = np.zeros(4)
    add_delta(total, v(1, 2), np.array([0, 3], np.uint32))
    add_delta(total, v(5), np.array([3], np.uint32))
    assert list(total) == [1, 0, 0, 7]
    c = v(0, 0, 0)
    add_delta(c, v(1, -1, 2))
    add_delta(c, v(10), np.array([1], np.uint32))
    assert list(c) == [1, 9, 2]


# -- model averaging (SparkNet) ---------------------------------------------------------------------
def test_model_averaging_round_barrier():
    theta = v(0, 0)
    r = ModelAveraging(theta, 0.1)
    r.on_pull(0, 0)
    r.on_pull(1, 0)
    r.apply(0, 0, v(2, 0), None)                 # Δ₀: device 0 ran τ steps from Θ₀
    assert list(theta) == [0, 0]                 # nothing moves before the round closes
    assert not r.ready(0, "pull") and r.ready(1, "pull") and r.ready(0, "push")
    assert r.waiting_for() == {1}
    r.apply(1, 1, v(0, 4), None)
    assert list(theta) == [1, 2]                 # Θ₀ + mean(Δ) = average of the two local models
    assert r.ready(0, "pull") and r.waiting_for() == {0, 1}   # the next round
    assert r.stats() == {"rounds": 1, "syncs": 1}


def test_model_averaging_round_closes_without_a_lost_member():
    theta = v(0)
    r = ModelAveraging(theta, 0.1)
    for d in range(3):
        r.on_pull(d, 0)
    r.apply(0, 0, v(3), None)
    r.apply(1, 0, v(6), None)
    assert theta[0] == 0 and r.waiting_for() == {2}
    r.forget(2)                                  # crashed / bye / silent: the barrier doesn't wait
    assert theta[0] == 4.5 and r.stats()["rounds"] == 1
    # a departed device that comes back with a delta takes part again
    r.apply(2, 3, v(1), None)
    assert theta[0] == pytest.approx(4.5)        # members {0, 1, 2}: 0 and 1 still owe this round
    r.apply(0, 0, v(2), None)
    r.apply(1, 0, v(3), None)
    assert theta[0] == pytest.approx(4.5 + 2)    # mean(1, 2, 3)


# -- dynamic averaging --------------------------------------------------------------------------------
def empty():
    return np.empty(0, F32), np.empty(0, np.uint32)


def test_dynamic_averaging_quiet_round_moves_nothing():
    theta = v(1, 1)
    r = DynamicAveraging(theta, 0.1)
    r.on_pull(0, 0)
    r.on_pull(1, 0)
    r.apply(0, 0, *empty())
    assert not r.ready(0, "push") and r.waiting_for() == {1}   # held until every member reported
    r.apply(1, 1, *empty())
    assert r.ready(0, "push") and r.ready(1, "push")
    assert not r.sync_due(0) and not r.sync_due(1)
    assert list(theta) == [1, 1] and r.stats() == {"rounds": 1, "syncs": 0}


def test_dynamic_averaging_violation_syncs_everyone():
    theta = v(0, 0)
    r = DynamicAveraging(theta, 0.1)
    r.on_pull(0, 0)
    r.on_pull(1, 0)
    r.apply(0, 0, v(2, 2), None)          # device 0 left its safe zone: reports Δ₀
    r.apply(1, 1, *empty())               # device 1 quiet
    assert r.sync_due(0) and r.sync_due(1)
    assert not r.ready(0, "pull")         # the average needs device 1's model first
    assert r.waiting_for() == {1}
    r.apply(1, 2, v(0, 2), None)          # device 1 uploads on Sync
    assert list(theta) == [1, 2]          # mean(Δ₀, Δ₁)
    assert r.ready(0, "pull") and r.ready(1, "pull")
    assert r.stats() == {"rounds": 1, "syncs": 1}


def test_dynamic_averaging_forgets_a_member_during_collect():
    theta = v(0)
    r = DynamicAveraging(theta, 0.1)
    for d in range(3):
        r.on_pull(d, 0)
    r.apply(0, 0, v(6), None)
    r.apply(1, 0, *empty())
    r.apply(2, 0, *empty())
    assert r.waiting_for() == {1, 2}
    r.apply(1, 0, v(0), None)
    r.forget(2)
    assert theta[0] == 3 and r.stats()["syncs"] == 1


# -- EASGD --------------------------------------------------------------------------------------------
def test_easgd_center_moves_by_the_elastic_difference():
    center = v(0, 0)
    worker = v(4, -8)
    new_worker, new_center = easgd_exchange(worker, center, 0.25)   # e = 0.25·(x − c) = (1, −2)
    e = new_center - center
    r = EASGD(center, 0.1)
    r.apply(0, 7, e, None)                # no staleness damping
    assert list(center) == [1, -2] and list(new_worker) == [3, -6]
    assert center.sum() + new_worker.sum() == worker.sum()            # the elastic force conserves Σ
    assert r.ready(0, "pull") and r.stats() == {"exchanges": 1}


# -- the PS holds and releases replies ------------------------------------------------------------------
def make_ps(rule_cls, n=2, **cfg):
    sent, events, now = [], [], [0.0]
    theta = np.zeros(3, F32)
    hooks = Hooks(record=lambda t, row: events.append(row) if t == "events" else None,
                  send=lambda peer, frames: sent.append((peer, wire.decode(frames))),
                  clock=lambda: (now[0], math.nan))
    ps = ParameterServer(PSConfig(n_devices=n, welcome=lambda d: wire.WelcomeConfig(0, "mlp", {}, "dense", {}, device=d), class_of=lambda d: "c", **cfg),
                         theta, rule_cls(theta, 0.1), hooks)
    return ps, sent, events, now


def call(ps, d, msg):
    out = ps.process(b"peer%d" % d, [bytes(memoryview(f)) if not isinstance(f, np.ndarray) else f.tobytes()
                                      for f in wire.encode(msg)])
    return wire.decode(out) if out is not None else None


def join(ps, n):
    return [call(ps, d, wire.Hello(d)).session for d in range(n)]


def test_ps_holds_the_next_pull_until_the_round_closes():
    ps, sent, _, _ = make_ps(ModelAveraging)
    s = join(ps, 2)
    for d in (0, 1):
        assert call(ps, d, wire.Pull(s[d])).version == 0
    assert isinstance(call(ps, 0, wire.Push(s[0], 0, 0, v(2, 0, 0))), wire.Ack)
    assert call(ps, 0, wire.Pull(s[0])) is None            # held: round 0 still open
    egress = ps.meter.egress_bytes
    ack = call(ps, 1, wire.Push(s[1], 0, 0, v(0, 4, 0)))
    assert isinstance(ack, wire.Ack) and ack.version == 2
    [(peer, model)] = sent                                # released the moment the round closed
    assert peer == b"peer0" and isinstance(model, wire.Model) and model.version == 2
    assert list(model.params) == [1, 2, 0]
    assert ps.meter.egress_bytes > egress + model.params.nbytes   # held replies are counted too
    assert ps.devices[0].pulled == 2


def test_ps_dynamic_averaging_answers_reports_with_sync():
    ps, sent, _, _ = make_ps(DynamicAveraging)
    s = join(ps, 2)
    for d in (0, 1):
        call(ps, d, wire.Pull(s[d]))
    assert call(ps, 0, wire.Push(s[0], 0, 0, v(2, 0, 0))) is None          # violation, held
    reply = call(ps, 1, wire.Push(s[1], 0, 0, *empty()))                   # quiet, closes the report
    assert isinstance(reply, wire.Sync)
    assert [(p, type(m)) for p, m in sent] == [(b"peer0", wire.Sync)]
    assert call(ps, 0, wire.Pull(s[0])) is None                            # wait for the average
    assert isinstance(call(ps, 1, wire.Push(s[1], 1, 0, v(0, 2, 0))), wire.Ack)
    assert sent[-1][0] == b"peer0" and list(sent[-1][1].params) == [1, 1, 0]


def test_ps_stop_and_silence_release_held_replies():
    ps, sent, events, now = make_ps(ModelAveraging, n=3, lost_after=5.0)
    s = join(ps, 3)
    for d in range(3):
        call(ps, d, wire.Pull(s[d]))
    call(ps, 0, wire.Push(s[0], 0, 0, v(3, 0, 0)))
    call(ps, 1, wire.Push(s[1], 0, 0, v(6, 0, 0)))
    assert call(ps, 0, wire.Pull(s[0])) is None and call(ps, 1, wire.Pull(s[1])) is None
    now[0] = 4.0
    ps.tick()
    assert sent == []                                   # device 2 not silent long enough yet
    now[0] = 6.0
    ps.tick()                                           # device 2 silent 6 s > 5 s: round closes
    assert sorted(p for p, _ in sent) == [b"peer0", b"peer1"]
    assert all(list(m.params) == [4.5, 0, 0] for _, m in sent)
    assert [e["device"] for e in events if e["event"] == "left-round"] == [2]
    # a stop answers whatever is held with Stop
    call(ps, 0, wire.Push(s[0], 1, 2, v(1, 0, 0)))
    assert call(ps, 0, wire.Pull(s[0])) is None
    ps.request_stop("test over")
    ps.tick()
    assert isinstance(sent[-1][1], wire.Stop) and sent[-1][0] == b"peer0"


def test_ps_without_send_hook_refuses_to_hold():
    ps, _, _, _ = make_ps(ModelAveraging)
    ps.hooks.send = None
    s = join(ps, 2)
    call(ps, 0, wire.Pull(s[0]))
    call(ps, 1, wire.Pull(s[1]))
    call(ps, 0, wire.Push(s[0], 0, 0, v(1, 0, 0)))
    with pytest.raises(RuntimeError, match="Hooks.send"):
        call(ps, 0, wire.Pull(s[0]))


# -- device policies (stub trainer: each step adds `step` to x, loss `loss`) ----------------------------
class StubTrainer:
    def __init__(self, step, loss=1.0):
        self.x, self.step_vec, self.loss, self.steps = None, v(*step), loss, 0

    def set_params(self, theta):
        self.x = np.array(theta, F32)

    def params(self):
        return self.x.copy()

    def local_step(self, lr):
        self.x += self.step_vec
        self.steps += 1
        return self.loss


def model(version, *xs):
    return wire.Model(version, v(*xs))


def test_local_steps_pushes_the_delta_after_tau_steps():
    tr = StubTrainer([1, 0])
    p = LocalSteps(tr, local_steps=3, lr=0.1)
    up = p.next(model(4, 1, 1))
    assert isinstance(up, Upload) and up.version == 4 and list(up.values) == [3, 0] and up.indices is None
    assert p.next(wire.Ack(5)) == PULL


def test_dynamic_policy_reports_quietly_inside_the_safe_zone():
    tr = StubTrainer([1, 0])
    p = DynamicLocal(tr, local_steps=2, lr=0.1, delta=5.0)
    up = p.next(model(0, 0, 0))                   # ‖(2, 0)‖² = 4 ≤ 5: quiet
    assert up.values.size == 0 and up.indices.size == 0
    up = p.next(wire.Ack(1))                      # quiet round: keep training our own model
    assert list(tr.x) == [4, 0] and list(up.values) == [4, 0]   # 16 > 5: violation, Δ = x − r
    assert p.next(wire.Sync(2)) == PULL           # our delta is in: wait for the average
    up = p.next(model(3, 1, 1))                   # the average is the new reference
    assert up.values.size == 0 and list(tr.x) == [3, 1]


def test_dynamic_policy_uploads_on_sync_when_quiet():
    tr = StubTrainer([0, 1])
    p = DynamicLocal(tr, local_steps=1, lr=0.1, delta=5.0)
    assert p.next(model(0, 0, 0)).values.size == 0
    up = p.next(wire.Sync(3))                     # someone else violated: upload our model's Δ
    assert list(up.values) == [0, 1] and up.version == 0
    assert p.next(wire.Ack(4)) == PULL


def test_elastic_policy_exchanges_when_the_accumulated_loss_passes_the_threshold():
    tr = StubTrainer([2, 0], loss=2.0)
    p = make_policy({"name": "elastic", "lr": 0.1, "moving_rate": 0.25, "loss_threshold": 5.0}, tr)
    assert isinstance(p, Elastic)
    assert p.next(model(0, 0, 0)) == PULL and tr.steps == 3   # 2 + 2 + 2 = 6 > 5
    up = p.next(model(7, 4, 0))                   # x = (6, 0), c = (4, 0): e = 0.25·(2, 0)
    assert up.version == 7 and list(up.values) == [0.5, 0] and list(tr.x) == [5.5, 0]
    assert p.next(wire.Ack(8)) == PULL and tr.steps == 6


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="unknown device policy 'gossip'"):
        make_policy({"name": "gossip"}, None)


def test_trainer_local_step_is_sgd_on_the_next_batch():
    from edgebed.device_agent.trainer import Trainer
    from edgebed.models import initial_theta
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 255, (40, 28, 28), dtype=np.uint8), rng.integers(0, 10, 40).astype(np.uint8)
    theta, _ = initial_theta("mlp", 0)
    a = Trainer("mlp", x, y, 10, 0, 0)
    b = Trainer("mlp", x, y, 10, 0, 0)
    g, loss_b = b.gradient(theta)
    a.set_params(theta)
    loss_a = a.local_step(0.05)
    assert loss_a == pytest.approx(loss_b)
    np.testing.assert_allclose(a.params(), theta - 0.05 * g, atol=1e-6)


# -- scenario keys ------------------------------------------------------------------------------------
BASE = {"name": "s", "workers": {"n": 2}, "stop": {"updates": 10}}


def test_scenario_accepts_the_spark_algorithms_and_sends_their_policy():
    from edgebed.emulator.welcome import welcome_config
    sc = parse_scenario({**BASE, "algorithm": {"name": "dynamic-averaging", "local_steps": 5, "delta": 0.5}})
    assert welcome_config(sc, 0, "dense", {}).policy == {"name": "dynamic", "local_steps": 5, "lr": 0.1,
                                                            "delta": 0.5}
    sc = parse_scenario({**BASE, "algorithm": {"name": "easgd", "moving_rate": 0.3}})
    assert RULES["easgd"].device_policy(sc.algorithm)["moving_rate"] == 0.3
    again = parse_scenario(sc.to_dict())          # a resolved scenario (every key present) validates
    assert again == sc
    assert welcome_config(parse_scenario(BASE), 0, "top-c-per-layer", {}).policy == {"name": "gradient"}


@pytest.mark.parametrize("algorithm, message", [
    ({"name": "asgd", "delta": 2.0}, "algorithm.delta: a parameter of dynamic-averaging, not of asgd; "
                                      "remove it or set algorithm.name to dynamic-averaging"),
    ({"name": "model-averaging", "moving_rate": 0.5}, "algorithm.moving_rate: a parameter of easgd, not of"),
    ({"name": "asgd", "local_steps": 5}, "algorithm.local_steps: a parameter of model-averaging and "
                                         "dynamic-averaging, not of asgd"),
    ({"name": "easgd", "c": 0.1}, "algorithm.c: a parameter of comp-asgd and adacomp, not of easgd"),
    ({"name": "easgd", "moving_rate": 1.5}, "algorithm.moving_rate: Input should be less than 1"),
    ({"name": "model-averaging", "local_steps": 0}, "algorithm.local_steps: Input should be greater than"),
    ({"name": "easgd", "loss_threshold": -1}, "algorithm.loss_threshold: Input should be greater than 0"),
])
def test_scenario_refuses_bad_spark_parameters(algorithm, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario({**BASE, "algorithm": algorithm}, "x.yaml")


def test_elastic_policy_with_a_fixed_period_exchanges_every_tau_steps_whatever_the_loss():
    """EASGD's fixed communication period (``algorithm.period``): τ local steps, then an exchange,
    even when the accumulated loss passed the threshold long before or never reaches it."""
    high, low = StubTrainer([2, 0], loss=100.0), StubTrainer([2, 0], loss=0.0)
    for tr in (high, low):
        p = make_policy({"name": "elastic", "lr": 0.1, "moving_rate": 0.25, "loss_threshold": 5.0,
                         "period": 4}, tr)
        assert p.next(model(0, 0, 0)) == PULL and tr.steps == 4
        p.next(model(1, 0, 0))
        assert p.next(wire.Ack(2)) == PULL and tr.steps == 8


def test_easgd_period_reaches_the_devices_and_is_left_out_of_the_welcome_when_unset():
    from edgebed.algorithms import FLAT_KEYS, flat
    from edgebed.ps.rules import RULES
    fixed = parse_scenario({**BASE, "algorithm": {"name": "easgd", "period": 10}})
    assert RULES["easgd"].device_policy(fixed.algorithm)["period"] == 10
    assert flat(fixed.algorithm)["period"] == 10
    assert list(flat(parse_scenario({**BASE, "algorithm": {"name": "easgd"}}).algorithm)) == list(FLAT_KEYS)
    assert "τ=10" in fixed.algorithm.describe()
    with pytest.raises(ScenarioError, match="algorithm.period"):
        parse_scenario({**BASE, "algorithm": {"name": "easgd", "period": 0}})
