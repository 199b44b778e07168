"""A departure from goodput's plan that goodput undoes once it has measured it is not repeated
(``controllers/policy/refute.py``, issue 19, session 40)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from dynamix_hvd.controllers.policy.refute import RefutedDepartures

ROOT = Path(__file__).resolve().parents[2]
# the guards' worlds below were chosen where this policy departs (the default of sessions 44-51; the guards are
# the controller's, whatever the policy)
PREVIOUS_DEFAULT = "dynamix_hvd/agent/policies/default_s44.zip"


def test_two_refutations_close_a_direction_and_the_closing_backs_off():
    r = RefutedDepartures(limit=2, cooldown=10)
    r.judge(None, 100.0)
    r.record(+1)                 # grew to 150 ...
    r.judge(100.0, 150.0)        # ... goodput went back to 100: refuted once
    assert r.allow(+1) and r.refuted[1] == 1
    r.record(+1)
    r.judge(100.0, 150.0)        # twice in a row: larger batches closed for 10 decisions
    assert not r.allow(+1) and r.allow(-1) and r.allow(0)
    assert "refused for 10 decisions" in r.last_verdict
    for _ in range(9):
        r.record(0)
        r.judge(100.0, 100.0)
        assert not r.allow(+1)
    r.record(0)
    r.judge(100.0, 100.0)
    assert r.allow(+1)           # reopened; one more refutation closes it again, for twice as long
    r.record(+1)
    r.judge(100.0, 150.0)
    assert not r.allow(+1) and "refused for 20 decisions" in r.last_verdict


def test_a_kept_departure_resets_the_count_and_directions_are_apart():
    r = RefutedDepartures(limit=2)
    r.record(+1)
    r.judge(100.0, 150.0)        # refuted
    r.record(+1)
    r.judge(148.0, 150.0)        # goodput kept it (within 5%): confirmed
    assert r.refuted[1] == 0 and "kept" in r.last_verdict
    r.record(+1)
    r.judge(100.0, 150.0)
    assert r.allow(+1)           # one refutation since the confirmation
    r.record(-1)
    r.judge(100.0, 80.0)         # a smaller batch undone: counted for that direction only
    assert r.refuted[-1] == 1 and r.refuted[1] == 1
    s = RefutedDepartures(limit=2)
    s.load_state_dict(r.state_dict())
    assert s.state_dict() == r.state_dict()
    off = RefutedDepartures(limit=0)
    off.record(+1)
    off.judge(1.0, 100.0)
    assert off.allow(+1) and off.pending is None
    with pytest.raises(ValueError, match="refute limit=-1"):
        RefutedDepartures(limit=-1)
    with pytest.raises(ValueError, match="ppo state 'refute'"):
        RefutedDepartures().load_state_dict({"refuted": "x"})


def _chimera(tmp_path, stats: str, tput: str) -> Path:
    spec = importlib.util.spec_from_file_location("chimera_workloads", ROOT / "benchmarks" / "chimera_workloads.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.make(stats, tput, tmp_path, ROOT)


def _time(sim, name: str, seed: int) -> tuple[float, list[str]]:
    from dynamix_hvd.decide import control_loop
    from dynamix_hvd.plan import Plan
    from dynamix_hvd.replay.runner import build_controller
    from dynamix_hvd.safety import MoveLimits
    sim.reset(seed)
    ctl = build_controller(name, sim, seed)
    reasons = []
    for _ in control_loop(sim, ctl, sim.bounds(), Plan.uniform(sim.n, sim.base_batch), limits=MoveLimits(),
                          max_intervals=100_000):
        reasons.append(getattr(ctl, "last_reason", "") or "")
    return sim.time, reasons


def _plans(sim, name: str, seed: int, k: int) -> list[tuple[int, ...]]:
    """The first ``k`` plans ``name`` chooses on ``sim`` (per-rank batch sizes)."""
    from dynamix_hvd.decide import control_loop
    from dynamix_hvd.plan import Plan
    from dynamix_hvd.replay.runner import build_controller
    from dynamix_hvd.safety import MoveLimits
    sim.reset(seed)
    ctl = build_controller(name, sim, seed)
    out = []
    for _, plan, _ in control_loop(sim, ctl, sim.bounds(), Plan.uniform(sim.n, sim.base_batch), limits=MoveLimits(),
                                   max_intervals=k):
        out.append(plan.batch_sizes)
    return out


def test_the_guard_stops_repeating_departures_goodput_undoes(tmp_path):
    """deepspeech2's curves on bert's step times at N = 32 (a pairing no policy was trained on): the
    previous default grows the batch at every other decision and goodput undoes it each time; with the
    guard (the controller's defaults) it stops after two and is within a few percent of goodput instead
    of ~20% behind it."""
    from dynamix_hvd.replay.runner import make_world
    sim = make_world(str(_chimera(tmp_path, "deepspeech2", "bert")), "job_3_norm", 32).sim
    t_goodput, _ = _time(sim, "goodput", 12)
    t_unguarded, _ = _time(sim, f"ppo:{PREVIOUS_DEFAULT}?refute=0&warmup=0", 12)
    t_default, reasons = _time(sim, f"ppo:{PREVIOUS_DEFAULT}", 12)
    assert t_unguarded > 1.10 * t_goodput
    assert t_default < 1.05 * t_goodput
    assert any("refused: goodput undid the last 2 departures" in r for r in reasons)
    with pytest.raises(ValueError, match="refute='x'"):
        _time(sim, f"ppo:{PREVIOUS_DEFAULT}?refute=x", 12)


def test_a_departure_goodput_keeps_is_not_refused():
    """Where the previous default's departures pay (cifar10, N = 8, seed 5), goodput keeps them and the
    guard changes nothing."""
    from dynamix_hvd.replay.worlds import WorldSpec, build_sim
    sim = build_sim(WorldSpec("cifar10", 8, "none", 5))
    t_guarded, reasons = _time(sim, f"ppo:{PREVIOUS_DEFAULT}?warmup=0", 5)
    t_unguarded, _ = _time(sim, f"ppo:{PREVIOUS_DEFAULT}?refute=0&warmup=0", 5)
    assert t_guarded == pytest.approx(t_unguarded, rel=1e-9)
    assert not any("refused: goodput undid" in r for r in reasons)


def test_the_guard_is_off_while_fine_tuning():
    """A fine-tuned policy learns from the actions it sampled; the guard must not replace them."""
    from dynamix_hvd.controllers.ppo import PPOController
    from dynamix_hvd.plan import PlanBounds
    bounds = PlanBounds(max_batch=[256] * 4)
    assert PPOController(bounds, 32).refute.limit == 2
    assert PPOController(bounds, 32, refute=0).refute.limit == 0
    assert PPOController(bounds, 32, finetune=True).refute.limit == 0
    with pytest.raises(ValueError, match="refute=True"):
        PPOController(bounds, 32, refute=True)


def test_no_departure_during_the_warmup_then_the_guard_as_before():
    r = RefutedDepartures(limit=2, warmup=3)
    for t in range(1, 4):
        r.judge(100.0, 100.0)
        assert r.t == t and not r.allow(+1) and not r.allow(-1) and r.allow(0)
    r.judge(100.0, 100.0)
    assert r.allow(+1) and r.allow(-1)             # decision 4: departures open
    s = RefutedDepartures(limit=2, warmup=3)
    s.load_state_dict(r.state_dict())
    assert s.allow(+1)                             # a resumed job does not start its warm-up again
    r.reset()
    r.judge(100.0, 100.0)
    assert not r.allow(+1) and r.warmup == 3       # a new job does
    assert RefutedDepartures(limit=0, warmup=2).allow(+1) is False   # the warm-up holds with the guard off
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="warmup="):
            RefutedDepartures(warmup=bad)


def test_the_policy_takes_goodputs_plan_during_its_warmup():
    """cifar10, N = 8, seed 5, where the policy without a warm-up departs in its first decisions: with
    warmup=6 its first six plans are goodput's and the log says why; the default warm-up is the goodput
    model's history (16 decisions); fine-tuning turns the warm-up off."""
    from dynamix_hvd.controllers.ppo import PPOController
    from dynamix_hvd.plan import PlanBounds
    from dynamix_hvd.replay.worlds import WorldSpec, build_sim
    sim = build_sim(WorldSpec("cifar10", 8, "none", 5))
    plain, free, held = (_plans(sim, name, 5, 7) for name in ("goodput", f"ppo:{PREVIOUS_DEFAULT}?warmup=0",
                                                               f"ppo:{PREVIOUS_DEFAULT}?refute=2&warmup=6"))
    assert held == plain and free != plain       # the policy departs from goodput in its first six plans
    _, reasons = _time(sim, f"ppo:{PREVIOUS_DEFAULT}?refute=2&warmup=6", 5)
    refused = [(k, r) for k, r in enumerate(reasons[:6]) if " refused: " in r]
    assert refused and all(f"refused: decision {k + 1} of the first 6, where goodput's plan" in r for k, r in refused)
    assert not any("refused: decision" in r for r in reasons[6:])
    bounds = PlanBounds(max_batch=[256] * 4)
    assert PPOController(bounds, 32, warmup=5).refute.warmup == 5
    assert PPOController(bounds, 32).refute.warmup == 16          # the default: the goodput model's history
    assert PPOController(bounds, 32, warmup=0).refute.warmup == 0
    assert PPOController(bounds, 32, warmup=5, finetune=True).refute.warmup == 0
    with pytest.raises(ValueError, match="warmup=-1"):
        PPOController(bounds, 32, warmup=-1)
    with pytest.raises(ValueError, match="warmup='x'"):
        _time(sim, f"ppo:{PREVIOUS_DEFAULT}?warmup=x", 5)


def test_each_decision_says_what_became_of_the_policys_choice(tmp_path):
    """``last_outcome`` (the decision log's ``policy`` field, counted by the live bench): the gates of
    the policy's choice in the order they act, checked in a replay world where the policy departs."""
    from dynamix_hvd.agent.support_fit import observation_columns, write_support
    from dynamix_hvd.controllers.policy.io import load_policy
    from dynamix_hvd.controllers.policy.support import Support
    from dynamix_hvd.controllers.ppo import POLICY_OUTCOMES, _outcome
    from dynamix_hvd.decide import control_loop
    from dynamix_hvd.plan import Plan
    from dynamix_hvd.replay.runner import build_controller
    from dynamix_hvd.replay.worlds import WorldSpec, build_sim
    from dynamix_hvd.safety import MoveLimits
    assert _outcome(False, True, None, None, False, False) == "outside_support"
    assert _outcome(False, False, None, None, True, False) == "noop"
    assert _outcome(True, False, "t", None, False, False) == "trust"
    assert _outcome(True, False, None, "r", True, False) == "warmup"
    assert _outcome(True, False, None, "r", False, False) == "refuted"
    assert _outcome(True, False, None, None, False, False) == "held"
    assert _outcome(True, False, None, None, False, True) == "departed"

    def outcomes(name: str) -> list[str]:
        sim = build_sim(WorldSpec("cifar10", 8, "none", 5))
        sim.reset(5)
        ctl = build_controller(name, sim, 5)
        return [ctl.last_outcome for _ in control_loop(sim, ctl, sim.bounds(), Plan.uniform(sim.n, sim.base_batch),
                                                       limits=MoveLimits(), max_intervals=60)]
    held = outcomes(f"ppo:{PREVIOUS_DEFAULT}?refute=2&warmup=6")
    assert set(held) <= set(POLICY_OUTCOMES)
    assert "warmup" in held[:6] and "warmup" not in held[6:] and "departed" not in held[:6]
    free = outcomes(f"ppo:{PREVIOUS_DEFAULT}?warmup=0")
    assert "departed" in free[:6] and "warmup" not in free
    cols = observation_columns(load_policy(PREVIOUS_DEFAULT)[1])
    nowhere = write_support(PREVIOUS_DEFAULT, Support(cols, np.full(len(cols), 5.0), np.full(len(cols), 5.0)),
                            tmp_path / "nowhere.zip")
    assert set(outcomes(f"ppo:{nowhere}?warmup=0")) == {"outside_support"}


def test_with_passguard_the_warmup_holds_the_pass_action_too():
    """The default's pass action (goodput's batch with the noise-scale hold passed) is a scale of 1, so
    the warm-up, which acts on a global action's direction, never held it (ncf, N = 8, seed 5: the
    default grows to 1.5x goodput's batch at its first decision). With ``passguard=on`` the pass counts
    as growth where goodput's unheld batch is above its held one: the first six plans are goodput's and
    the log says the pass was refused; after the warm-up the pass is taken as before."""
    from dynamix_hvd.controllers.ppo import PPOController
    from dynamix_hvd.plan import PlanBounds
    from dynamix_hvd.replay.worlds import WorldSpec, build_sim
    default = "dynamix_hvd/agent/policies/default.zip"
    sim = build_sim(WorldSpec("ncf", 8, "none", 5))
    plain, free, held = (_plans(sim, name, 5, 8) for name in (
        "goodput", f"ppo:{default}?warmup=6", f"ppo:{default}?warmup=6&passguard=on"))
    assert free[0] != plain[0] and sum(free[0]) > sum(plain[0])     # the pass, unheld by the warm-up
    assert held[:6] == plain[:6]
    _, reasons = _time(sim, f"ppo:{default}?warmup=6&passguard=on", 5)
    assert any("the pass refused: decision 1 of the first 6" in r for r in reasons[:1])
    _, free_reasons = _time(sim, f"ppo:{default}?warmup=6", 5)
    assert not any("refused: decision" in r for r in free_reasons[:6])
    bounds = PlanBounds(max_batch=[256] * 4)
    assert PPOController(bounds, 32).guard_pass is False
    with pytest.raises(ValueError, match="guard_pass=1"):
        PPOController(bounds, 32, guard_pass=1)
    with pytest.raises(ValueError, match="passguard='yes'"):
        _time(sim, f"ppo:{default}?passguard=yes", 5)
