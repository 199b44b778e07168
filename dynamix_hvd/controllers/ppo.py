"""PPO controller: the trained DYNAMIX policy (stable-baselines3 zip) applied to any number of ranks.

The policy's actor is one MLP shared by every worker row (see ``dynamix_hvd.controllers.policy.net``), so
it is run directly on the N rows of the observation built by ``dynamix_hvd.state`` (N = 1 ..
1024+, whatever N it was trained with). The action becomes proposed sizes exactly as in the
training env (``dynamix_hvd.controllers.policy.actions``). Problems with the policy file raise
``PolicyLoadError`` naming the file and the problem.

With ``finetune=True`` (``DynamixConfig.finetune``) the controller acts with its *own* copy of the
policy, samples its actions and fine-tunes that copy online with PPO in a background thread
(``dynamix_hvd.controllers.finetune``); its ``state_dict`` then carries the fine-tuned weights.
Without it nothing changes: deterministic actions of the cached, read-only policy.

With ``members`` (more policy files trained for the same observation and actions) the controller
acts with the ensemble of the policy and its members (``controllers.policy.ensemble``): by default
a move away from the no-op only where every one of them moves the same way, and then the
smallest of their moves.

A policy file that records the observations it was trained on (``dynamix_config["support"]``,
``controllers.policy.support``) acts only inside them: for an observation outside that box the
controller takes the no-op, goodput's plan (``support=False`` ignores the record). Fine-tuning
keeps the guard: outside the support the decision is goodput's and is not a transition the policy
learns from (its trajectory ends there). In an ensemble each member answers the no-op outside its
own support.

A departure from goodput's plan that goodput undoes at the next decision, once it has measured the
departed batch for an interval, is *refuted*; after ``refute`` (default 2) refutations in a row in
one direction, departures that way are refused for a back-off that doubles at every closing
(``controllers.policy.refute``; ``refute=0`` turns the guard off; off with ``finetune=True``, whose
transitions must be the actions the policy sampled). No departure is taken in the first ``warmup``
decisions of a job either (default: the goodput model's history, 16 decisions; ``warmup=0`` turns it
off): on workloads made of two measured halves, a growth in the first 16 decisions that goodput then
kept cost up to 5% (session 42). Both guards act on a global action's direction (its scale above or below
1); the pass action of a ``pass_hold`` policy has a scale of 1, so they hold it only with ``guard_pass=True``,
which counts it as growth or shrinkage by the sign of goodput's unheld batch against its held one (off by
default: on the shipped cells it gives up the session-52 default's early passes, 0.977x goodput against 0.969x,
session 53).

When the hook's goodput guard stops it (goodput fell after its decisions), the job goes to goodput,
the policy's own no-op, and from there to the configured ``fallback_controller`` (``guard_fallback``;
``decide.Decider``).

Each decision also says, in one word, what became of the policy's own choice (``last_outcome``,
the decision log's ``policy`` field; ``POLICY_OUTCOMES``): ``outside_support`` (the observation was
outside the policy's training support: goodput's plan), ``noop`` (the policy chose goodput's plan),
``warmup`` / ``refuted`` / ``trust`` (it departed and that gate refused it), ``held`` (its per-worker
moves were dropped because the measurements do not justify a re-split, and it chose no global
scale) or ``departed`` (its departure went on to the plan bounds and move limits, which may still
cap it). The live bench counts them per run.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from dynamix_hvd.controllers.policy.io import PolicyLoadError, default_policy_path, load_policy  # noqa: F401 (re-exported)
from dynamix_hvd.controllers.base import Controller
from dynamix_hvd.controllers.evidence import MIN_EXCESS
from dynamix_hvd.controllers.policy.refute import RefutedDepartures
from dynamix_hvd.plan import PlanBounds
from dynamix_hvd.records import ClusterState


POLICY_OUTCOMES = ("outside_support", "noop", "warmup", "refuted", "trust", "held", "departed")


class PPOController(Controller):
    name = "ppo"
    guarded = True
    guard_pass = False      # the warm-up and refute guard hold the pass action too (``__init__``'s guard_pass)

    def __init__(self, bounds: PlanBounds, base_batch: int, policy: str | os.PathLike | None = None,
                 deterministic: bool = True, seed: int = 0, finetune: bool = False, finetune_steps: int = 32,
                 finetune_lr: float = 1e-4, finetune_epochs: int = 4, finetune_seed: int | None = None,
                 reference_goodput_fn: Callable[[ClusterState], float] | None = None, trust: float = 0.0,
                 members: Sequence[str | os.PathLike] = (), ensemble: str = "consensus", support: bool = True,
                 margin: float = 0.0, refute: int = 2, warmup: int | None = None, guard_pass: bool = False,
                 guard_fallback: str | None = "goodput") -> None:
        super().__init__(bounds, base_batch)
        from dynamix_hvd.controllers.policy.ensemble import RULES
        if ensemble not in RULES:
            raise ValueError(f"ensemble={ensemble!r}: expected one of {RULES}")
        if members and (finetune or not deterministic):
            raise ValueError("members: an ensemble acts deterministically and is not fine-tuned "
                             "(finetune=False, deterministic=True)")
        self.ensemble = ensemble
        if not (isinstance(trust, (int, float)) and 0.0 <= float(trust) < 1.0):
            raise ValueError(f"trust={trust!r}: a number in [0, 1) (0: off)")
        # goodput anchor: a global scale other than the no-op is taken only where the goodput
        # model predicts at most this relative loss of goodput for it (0: off)
        self.trust = float(trust)
        if not (isinstance(margin, (int, float)) and math.isfinite(margin)):
            raise ValueError(f"margin={margin!r}: a finite number (0: off)")
        # the best global scale other than the no-op where its logit beats the no-op's by this (0: the argmax)
        self.margin = float(margin)
        if isinstance(refute, bool) or not isinstance(refute, int):
            raise ValueError(f"refute={refute!r}: an integer >= 0 (0: off)")
        # departures goodput undoes once it has measured them are not repeated (controllers/policy/refute.py);
        # off while fine-tuning: the fine-tuner learns from the actions it sampled, which must be the ones taken
        self.refute = RefutedDepartures(limit=0 if finetune else refute)
        if not isinstance(guard_pass, bool):
            raise ValueError(f"guard_pass={guard_pass!r}: True or False")
        # the pass action (goodput's batch with the hold passed) counted as a departure by the warm-up and
        # the refute guard: upward or downward as goodput's unheld batch lies from its held one (_direction_of)
        self.guard_pass = guard_pass
        from dynamix_hvd.controllers import REGISTRY
        if guard_fallback is not None and (guard_fallback not in REGISTRY or guard_fallback in ("ppo", "oracle")):
            raise ValueError(f"guard_fallback={guard_fallback!r}: one of "
                             f"{sorted(set(REGISTRY) - {'ppo', 'oracle'})} or None (the configured fallback_controller)")
        # when the goodput guard fires after this controller's decisions the job goes to goodput, the
        # policy's no-op (its anchor), and from there, if goodput's own decisions lose too, to the
        # configured fallback_controller (decide.Decider). Before session 65 it went to proportional
        # at once, which never grows the batch again: 15-20% slower in two replay episodes of 240
        self.guard_fallback = guard_fallback
        if warmup is not None and (isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0):
            raise ValueError(f"warmup={warmup!r}: an integer >= 0 (0: off; None: the goodput model's history)")
        from dynamix_hvd.controllers.policy.actions import ActionConfig
        from dynamix_hvd.state import N_FEATURES, ObsConfig
        import torch
        torch.manual_seed(seed)   # only matters with deterministic=False
        self.policy_path = policy
        self.policy, cfg = load_policy(policy)
        self.net = self.policy.mlp_extractor
        self.obs_config = ObsConfig.from_dict(cfg.get("obs", {}))
        self.action_config = ActionConfig.from_dict(cfg.get("action", {}))
        # per-worker history features (controllers/policy/history.py), when the policy was trained with them
        from dynamix_hvd.controllers.policy.history import N_HISTORY, WorkerHistory
        hist = cfg.get("history")
        self.history = WorkerHistory(int(hist.get("window", 8))) if hist else None
        expected = N_FEATURES + 1 + (N_HISTORY if self.history is not None else 0)
        if self.net.n_features != expected:
            raise PolicyLoadError(
                f"policy file {policy or default_policy_path()} expects {self.net.n_features - 1} features per "
                f"worker but this version of dynamix_hvd.state builds {expected - 1}: retrain the policy")
        if self.net.n_levels != self.action_config.n_levels or \
                self.net.n_global != len(self.action_config.global_scales):
            raise PolicyLoadError(f"policy file {policy or default_policy_path()}: action config does not match "
                                  "the network's output sizes")
        self.deterministic = deterministic
        if members and ensemble == "mean" and self.margin != 0:
            raise ValueError(f"margin={self.margin}: a margin compares one policy's logits; ensemble='mean' "
                             "combines the members' probabilities (use margin=0)")
        if members and self.action_config.pass_global is not None and ensemble != "mean":
            raise PolicyLoadError(f"policy file {policy or default_policy_path()} has a pass action (a second global "
                                  f"scale 1.0): its global actions are not ordered, so ensemble={ensemble!r} cannot "
                                  "combine them; use ensemble='mean' or run it alone")
        loaded = [self._member(m, cfg) for m in members]       # (network, config) of each member
        self.members = [net for net, _ in loaded]
        # the training support of the policy and of each member (None: not recorded, or support=False)
        self.supports = [self._support(c, p) if support else None
                         for c, p in [(cfg, policy)] + [(mcfg, m) for (_, mcfg), m in zip(loaded, members)]]
        self.last_outside: list[tuple[str, float, float, float]] = []
        self.last_outcome: str | None = None       # one of POLICY_OUTCOMES, for the decision log
        from dynamix_hvd.controllers.policy.actions import make_anchor
        self.anchor = make_anchor(self.action_config, bounds, base_batch)
        # ... nor taken during the first ``warmup`` decisions of a job (default: as many as the goodput
        # model's history holds, so that its fits have a full window first; off while fine-tuning)
        if warmup is None:
            model = getattr(getattr(self.anchor, "goodput", None), "model", None)
            warmup = model.history if model is not None else 0
        self.refute.warmup = 0 if finetune else int(warmup)
        self.target_B: float | None = None
        self.last_levels: np.ndarray | None = None
        self.last_global = 0.0
        self.last_scale = 1.0          # the global scale applied at the previous decision (GoodputAnchor)
        self.finetuner: Any = None
        self._own_policy = False      # True once self.policy is a private copy (fine-tuned weights)
        if finetune:
            from dynamix_hvd.reward import RewardWeights
            from dynamix_hvd.controllers.finetune import FineTuner
            self.finetuner = FineTuner(policy if policy is not None else default_policy_path(), len(bounds.max_batch),
                                       steps=finetune_steps, lr=finetune_lr, epochs=finetune_epochs,
                                       seed=seed if finetune_seed is None else finetune_seed)
            self.policy, self._own_policy = self.finetuner.acting, True
            self.net = self.policy.mlp_extractor
            self.reward_weights = RewardWeights.from_dict(cfg.get("reward", {}))
            self._prev_sizes: list[float] | None = None
            self.last_reward: dict[str, float] | None = None
            # G* of the reward's efficiency term; default: estimated from the state (finetune.reference_goodput)
            self.reference_goodput_fn = reference_goodput_fn
        self._warm_up()

    def _member(self, path: str | os.PathLike, cfg: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """(actor network, config) of ensemble member ``path``, which must observe and act as the policy does."""
        pol, mcfg = load_policy(path)
        for key in ("obs", "action", "history"):
            if (mcfg.get(key) or None) != (cfg.get(key) or None):
                raise PolicyLoadError(f"policy file {path}: its {key!r} config {mcfg.get(key)!r} differs from "
                                      f"{self.policy_path or default_policy_path()}'s {cfg.get(key)!r}: an ensemble's "
                                      "members must observe and act alike")
        net = pol.mlp_extractor
        if net.n_features != self.net.n_features:
            raise PolicyLoadError(f"policy file {path}: expects {net.n_features - 1} features per worker, "
                                  f"the ensemble's first policy {self.net.n_features - 1}")
        return net, mcfg

    def _support(self, cfg: dict[str, Any], path: str | os.PathLike | None) -> Any:
        """The policy's recorded training support (``controllers.policy.support``), or None."""
        d = cfg.get("support")
        if d is None:
            return None
        from dynamix_hvd.controllers.policy.support import Support
        try:
            sup = Support.from_dict(d, where=f"policy file {path or default_policy_path()}: dynamix_config.support")
        except ValueError as exc:
            raise PolicyLoadError(str(exc)) from exc
        if len(sup.columns) != self.net.n_features - 1:
            raise PolicyLoadError(f"policy file {path or default_policy_path()}: its support has {len(sup.columns)} "
                                  f"columns, its network {self.net.n_features - 1} features")
        return sup

    def _warm_up(self) -> None:
        """One throw-away observation + forward pass on a synthetic state, so the first live
        decision does not pay lazy imports and torch's first-call set-up (30-100 ms measured in
        the bench's first decision before this). Changes no controller state."""
        import dynamix_hvd.controllers.policy.actions  # noqa: F401  (decide's lazy imports)
        from dynamix_hvd.plan import Plan
        from dynamix_hvd.records import GlobalStats, WorkerStats
        n = len(self.bounds.max_batch)
        b = min(self.base_batch, min(self.bounds.max_batch))
        st = ClusterState(Plan.uniform(n, b), [WorkerStats(rank=r, batch_size=b, max_batch=self.bounds.max_batch[r],
                                                           compute_s=1e-3 * b, step_s=2e-3 * b) for r in range(n)],
                          GlobalStats())
        self.net.act_rows(self.observe(st), deterministic=True)
        if self.history is not None:
            self.history.reset()     # the synthetic state is no part of the job's history

    def observe(self, state: ClusterState) -> np.ndarray:
        """The (N, F) observation the policy sees for this state."""
        from dynamix_hvd.state import build_observation
        # the policy's own last per-worker levels, as in training (agent/env.py, the replay env). Not
        # ``state.last_action``: live, the hook's Decider fills it with the change in samples per rank
        # that was applied, so a policy saw e.g. -4 after an 8-sample move where training only ever showed
        # levels / k in [-1, 1] (found by the training support's box, session 34: every live decision
        # of the guarded policy was outside it on ``last_action``)
        last = self.last_levels
        if last is not None and np.size(last) != state.world_size:
            last = None
        st = ClusterState(state.plan, state.workers, state.glob, last)
        obs = build_observation(st, ref_global_batch=self.base_batch * state.world_size,
                                last_global_action=self.last_global, config=self.obs_config)
        if self.history is not None:     # added once per state (a second call returns the same)
            obs = np.concatenate([obs, self.history.features(state)], axis=1)
        return obs

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, int]:
        """Signed per-worker levels (-k..k) and the global-scale index."""
        if obs.ndim != 2 or obs.shape[1] != self.net.n_features - 1:
            raise PolicyLoadError(f"observation has shape {obs.shape}; the policy expects (N, {self.net.n_features - 1})")
        if self.finetuner is not None:
            if self._outside_own_support(obs):
                return np.zeros(obs.shape[0]), self.action_config.noop_global
            with self.finetuner.lock:    # weights are swapped under this lock after an update
                idx, gidx = self.net.act_rows(obs, deterministic=self.deterministic)
        else:
            if self.ensemble == "mean" and self.members:
                return self._act_mean(obs)
            acts = [(np.full(obs.shape[0], self.action_config.k), self.action_config.noop_global) if net is None
                    else net.act_rows(obs, deterministic=self.deterministic, margin=self.margin,
                                      noop=self.action_config.noop_global)
                    for net in self._members_inside(obs)]
            if len(acts) == 1:
                idx, gidx = acts[0]
            else:
                from dynamix_hvd.controllers.policy.ensemble import combine, combine_rows
                idx = combine_rows(np.stack([a[0] for a in acts]), self.action_config.k, self.ensemble)
                gidx = combine([a[1] for a in acts], self.action_config.noop_global, self.ensemble)
        return np.asarray(idx).astype(np.float64) - self.action_config.k, int(gidx)

    def _act_mean(self, obs: np.ndarray) -> tuple[np.ndarray, int]:
        """The ensemble's action under the ``mean`` rule: each member's softmax, the no-op with
        certainty for a member outside its training support, then the most probable mean action."""
        from dynamix_hvd.controllers.policy.ensemble import mean_choice, softmax
        k, noop = self.action_config.k, self.action_config.noop_global
        rows, globs = [], []
        for net in self._members_inside(obs):
            if net is None:
                rows.append(np.eye(self.action_config.n_levels)[np.full(obs.shape[0], k)])
                globs.append(np.eye(len(self.action_config.global_scales))[noop])
            else:
                row, glob, pass_logit = net.actor_heads_numpy(obs)
                rows.append(softmax(row))
                globs.append(net.global_probs(glob, pass_logit))
        idx, gidx = mean_choice(rows), int(mean_choice(globs))
        return np.asarray(idx).astype(np.float64) - k, gidx

    def _members_inside(self, obs: np.ndarray) -> list[Any]:
        """The network of the policy and of each member, None for one whose training support ``obs``
        is outside (an observation unlike any it was trained on: it answers the no-op); the features
        that left a support go to ``last_outside`` for the decision's reason."""
        self.last_outside = []
        nets = []
        for net, sup in zip([self.net] + self.members, self.supports):
            out = sup.outside(obs) if sup is not None else []
            self.last_outside.extend(out)
            nets.append(None if out else net)
        return nets

    def _outside_own_support(self, obs: np.ndarray) -> bool:
        """Whether ``obs`` is outside the (fine-tuned) policy's recorded training support; the
        features that left it go to ``last_outside`` for the decision's reason."""
        self.last_outside = self.supports[0].outside(obs) if self.supports[0] is not None else []
        return bool(self.last_outside)

    def _act_finetune(self, state: ClusterState, obs: np.ndarray) -> tuple[np.ndarray, int]:
        """Reward of the previous action from this state, then a sampled action (recorded)."""
        from dynamix_hvd.controllers.finetune import live_reward
        sizes = [float(w.batch_size) for w in state.workers]
        reward = None
        if self._prev_sizes is not None and len(self._prev_sizes) == len(sizes):
            ref = self.reference_goodput_fn(state) if self.reference_goodput_fn is not None else None
            self.last_reward = live_reward(state, self._prev_sizes, ref_global_batch=self.base_batch * len(sizes),
                                           weights=self.reward_weights, bounds=self.bounds, reference=ref)
            reward = self.last_reward["reward"]
        self._prev_sizes = sizes
        if self._outside_own_support(obs):      # goodput's plan: not the policy's decision, not learned from
            self.finetuner.skip(reward)
            return np.zeros(obs.shape[0]), self.action_config.noop_global
        idx, gidx = self.finetuner.step(obs, reward)
        return idx.astype(np.float64) - self.action_config.k, gidx

    def decide(self, state: ClusterState) -> Sequence[float]:
        from dynamix_hvd.controllers.policy.actions import global_action_feature, proposal_from_action
        sizes = state.plan.batch_sizes
        if len(sizes) != len(self.bounds.max_batch):
            raise ValueError(f"state has {len(sizes)} workers; this controller was built for "
                             f"{len(self.bounds.max_batch)} workers (one max_batch per rank)")
        if self.target_B is None or self.last_levels is None or self.last_levels.size != len(sizes):
            self.target_B = float(sum(sizes))
        if self.anchor is not None:
            self.anchor.observe(state, self.last_scale)
            self.refute.judge(getattr(self.anchor, "B", None), float(sum(sizes)))
        obs = self.observe(state)
        levels, gidx = self.act(obs) if self.finetuner is None else self._act_finetune(state, obs)
        chosen = self._departs(levels, gidx)
        gidx, trust_note = self._within_trust(gidx)
        gidx, refute_note, direction = self._not_refuted(gidx)
        # a global departure of a policy trained to pass the noise-scale hold is not held by it (decide_plan)
        self.passes_hold = self.action_config.passes_hold(gidx)
        ev = getattr(self.anchor, "evidence", None)
        if ev is not None and not (ev.act and ev.excess >= MIN_EXCESS):
            # the measurements do not justify moving the split (timing noise, steps too short to
            # time, an imbalance below the 10% worth a plan change at once): the policy's
            # per-worker moves are not applied either (issue 26); the anchor's own re-split of a
            # lasting 4-10% imbalance still is
            levels = np.zeros_like(levels)
        self.last_outcome = _outcome(chosen, bool(self.last_outside), trust_note, refute_note,
                                     self.refute.t <= self.refute.warmup, self._departs(levels, gidx))
        self.last_reason = "; ".join(x for x in (getattr(self.anchor, "reason", None), self.refute.last_verdict,
                                                 f"policy levels {_short(levels.astype(int).tolist())}, global scale "
                                                 f"{self.action_config.scale(gidx):g}", trust_note, refute_note,
                                                 self._outside_note()) if x)
        proposed, self.target_B = proposal_from_action(sizes, levels, gidx, self.target_B, self.action_config,
                                                       self.bounds, self.anchor)
        self.last_levels = levels
        self.last_global = global_action_feature(gidx, self.action_config)
        self.last_scale = self.action_config.scale(gidx)
        self.refute.record(direction)
        return [float(x) for x in proposed]

    def _departs(self, levels: np.ndarray, gidx: int) -> bool:
        """Whether an action leaves goodput's plan: a per-worker level or a global scale other than the no-op."""
        return bool(np.any(levels != 0)) or gidx != self.action_config.noop_global

    def _outside_note(self) -> str | None:
        """The decision log's note when a policy answered the no-op outside its training support."""
        if not self.last_outside:
            return None
        name, v, lo, hi = self.last_outside[0]
        more = f" (+{len(self.last_outside) - 1} more)" if len(self.last_outside) > 1 else ""
        return (f"policy answered the no-op: observation outside its training support, {name} {v:.3g} not in "
                f"[{lo:.3g}, {hi:.3g}]{more}")

    def _not_refuted(self, gidx: int) -> tuple[int, str | None, int]:
        """The policy's global scale, or the no-op when departures that way were refuted by goodput
        (``RefutedDepartures``: goodput undid ``refute`` of them in a row once it had measured them);
        and the direction of the action taken (``_direction_of``, 0 for the no-op), for the guard's record."""
        scale = self.action_config.scale(gidx)
        if not hasattr(self.anchor, "goodput"):
            return gidx, None, _direction(scale)
        direction = self._direction_of(gidx)
        if self.refute.allow(direction):
            return gidx, None, direction
        what = "the pass" if gidx == self.action_config.pass_global else f"global scale {scale:g}"
        if self.refute.t <= self.refute.warmup:
            return (self.action_config.noop_global, f"{what} refused: decision {self.refute.t} of "
                    f"the first {self.refute.warmup}, where goodput's plan is taken", 0)
        return (self.action_config.noop_global,
                f"{what} refused: goodput undid the last {self.refute.limit} departures that way", 0)

    def _direction_of(self, gidx: int) -> int:
        """The way global action ``gidx`` departs from goodput's batch, for the warm-up and the refute
        guard: the sign of its scale (``_direction``); with ``guard_pass``, for the pass action, the sign
        of goodput's unheld batch against its held one, 0 within the guard's tolerance (a pass where
        the hold does not bind is goodput's own plan)."""
        if not (self.guard_pass and gidx == self.action_config.pass_global and hasattr(self.anchor, "goodput")):
            return _direction(self.action_config.scale(gidx))
        held = self.anchor.B
        if held is None or not (math.isfinite(held) and held > 0):
            return 0
        return _direction(self.anchor.global_batch(held, passed=True) / held, self.refute.tolerance)

    def _within_trust(self, gidx: int) -> tuple[int, str | None]:
        """The policy's global scale, or the no-op when ``trust`` is on and the goodput model
        predicts a loss of more than ``trust`` for the batch that scale leads to (or has no
        stable estimate to predict it with): a learned departure is taken only where the model
        calls it a near-tie, which bounds what a policy can lose on a workload unlike those it
        was trained on."""
        noop = self.action_config.noop_global
        anchor = self.anchor
        if self.trust <= 0 or gidx == noop or not hasattr(anchor, "goodput") or anchor.B is None:
            return gidx, None
        scale = self.action_config.scale(gidx)
        r = anchor.goodput.predicted_ratio(anchor.B * scale, anchor.B)
        if r >= 1.0 - self.trust:
            return gidx, None
        return noop, f"global scale {scale:g} refused: goodput model predicts {r:.3f}x (trust {self.trust:g})"

    def reset_episode(self) -> None:
        """Forget the per-job decision state (target global batch, last action); with fine-tuning
        the next transition starts a new episode. The (fine-tuned) weights are kept."""
        self.target_B, self.last_levels, self.last_global, self.last_scale = None, None, 0.0, 1.0
        self.refute.reset()
        if self.history is not None:
            self.history.reset()
        if self.anchor is not None:
            from dynamix_hvd.controllers.policy.actions import make_anchor
            self.anchor = make_anchor(self.action_config, self.bounds, self.base_batch)
        if self.finetuner is not None:
            self._prev_sizes = None
            self.finetuner.end_episode()

    def state_dict(self) -> dict[str, Any]:
        d = {"target_B": self.target_B, "last_global": self.last_global, "last_scale": self.last_scale,
             "last_levels": None if self.last_levels is None else self.last_levels.tolist(),
             # the goodput model the anchor fitted (before: never written, so a resumed job lost it)
             "anchor": None if self.anchor is None else self.anchor.state_dict(),
             "refute": self.refute.state_dict()}
        if self.finetuner is not None:
            d["finetune"] = self.finetuner.state_dict()
            d["prev_sizes"] = self._prev_sizes
        elif self._own_policy:       # tensors and plain data: checkpoints load with weights_only=True
            d["finetune"] = {"format": 2, "policy": {k: v.detach().clone() for k, v in self.policy.state_dict().items()},
                             **self._loaded_finetune_counts}
        return d

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.target_B = state.get("target_B")
        self.last_global = float(state.get("last_global", 0.0))
        self.last_scale = float(state.get("last_scale", 1.0))
        ll = state.get("last_levels")
        self.last_levels = None if ll is None else np.asarray(ll, dtype=float)
        if self.anchor is not None and state.get("anchor"):
            self.anchor.load_state_dict(state["anchor"])
        if state.get("refute"):
            self.refute.load_state_dict(state["refute"])
        ft = state.get("finetune")
        if ft is None:
            return
        if self.finetuner is not None:
            self.finetuner.load_state_dict(ft)
            ps = state.get("prev_sizes")
            self._prev_sizes = None if ps is None else [float(x) for x in ps]
        else:
            # resumed without fine-tuning: act (deterministically) with the fine-tuned weights, on a
            # private copy so the cached shipped policy is never modified
            import copy
            from dynamix_hvd.controllers.finetune import finetune_weights
            weights = finetune_weights(ft)["policy"]
            if not self._own_policy:
                self.policy = copy.deepcopy(self.policy)
                self.policy.optimizer = None
                self._own_policy = True
            self.policy.load_state_dict(weights)
            self.net = self.policy.mlp_extractor
            self._loaded_finetune_counts = {k: ft[k] for k in ("n_updates", "n_transitions") if k in ft}

    def update_bounds(self, bounds: PlanBounds) -> None:
        super().update_bounds(bounds)
        if self.anchor is not None:
            self.anchor.update_bounds(bounds)

    def finetune_info(self) -> dict[str, Any] | None:
        """Fine-tuning counters and the last reward (for the decision log); None when not fine-tuning."""
        if self.finetuner is None:
            return None
        d = self.finetuner.stats()
        if self.last_reward is not None:
            d["reward"] = self.last_reward["reward"]
        return d

    def save_policy(self, path: str | os.PathLike) -> Path:
        """Write the policy this controller acts with (fine-tuned or not) as an SB3 zip that
        ``load_policy`` / ``PPOController(policy=path)`` load. Waits for a running update."""
        if self.finetuner is not None:
            return self.finetuner.save(path)
        if self.members:
            raise ValueError("save_policy: an ensemble is its member files; save them one by one")
        from dynamix_hvd.controllers.finetune import save_policy_zip
        return save_policy_zip(self.policy_path if self.policy_path is not None else default_policy_path(),
                               self.policy.state_dict(), path)


def _short(xs: list, k: int = 8) -> str:
    """A list for a log line: at most ``k`` entries, then how many more."""
    return str(xs) if len(xs) <= k else f"{xs[:k]} ... (+{len(xs) - k})"


def _outcome(chosen: bool, outside: bool, trust_note: str | None, refute_note: str | None, in_warmup: bool,
             applied: bool) -> str:
    """What became of the policy's choice at one decision (one of ``POLICY_OUTCOMES``)."""
    if not chosen:
        return "outside_support" if outside else "noop"
    if applied:
        return "departed"
    if trust_note:
        return "trust"
    if refute_note:
        return "warmup" if in_warmup else "refuted"
    return "held"


def _direction(scale: float, tolerance: float = 0.0) -> int:
    """+1 for a global scale above the no-op's 1.0 by more than ``tolerance``, -1 below, 0 otherwise."""
    return 1 if scale > 1.0 + tolerance else -1 if scale < 1.0 - tolerance else 0
