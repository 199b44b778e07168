"""Imitation of the causal oracle behind the safety layer (DAgger), in the replay world.

PPO's return in the replay world is the time to target relative to goodput's, paid at the end
of episodes of 100-600 decisions: trained on it, the goodput-anchored residual learns to leave
goodput's choice alone (sessions 24-26). This trainer gives the same policy network a dense,
per-decision target instead: the **expert** is ``causal_safe`` (``replay/oracle.py``: the true
workload curves and the speeds of the interval that has just ended, no future) restricted to the
policy's own actions. At a state, every global scale is tried through the live decision path
(``decide.decide_plan`` on a copy of the controller: anchor, evidence gate, ``limit_proposal``,
``next_plan``); the global batches they lead to are scored by ``oracle.causal_scores``; the label
is the best scale, the no-op when it is within ``tie`` of the best (the policy departs from
goodput only where the truth says it pays). Per-worker levels are labelled "no change" (the
anchor's split is the closed-form answer; the evidence gate zeroes them anyway).

DAgger (Ross et al., 2011): iteration 0 rolls the expert out; iteration i rolls out the policy
trained on everything so far (deterministic) and labels the states *it* visits, so the policy
learns what to do where its own mistakes take it. Each iteration retrains from scratch on the
aggregate (cross-entropy on the labels).

What the policy sees is only the live observation (``PPOController.observe``): noise scale,
loss trends, step-time features, progress; never the curves. Whether those features tell, on a
workload it has not seen, when goodput's efficiency model is wrong is what leave-one-out
measures (``dynamix eval-replay --loo``).

    dynamix train-policy --world replay --method imitate --dagger-iters 3 --worlds-per-iter 24 \\
        --seed 0 --out policy.zip [--workloads bert,cifar10,deepspeech2]
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dynamix_hvd.agent.replay_env import ReplayEnv, ReplayEnvConfig
from dynamix_hvd.decide import decide_plan
from dynamix_hvd.replay.oracle import candidate_batches, causal_safe_step, causal_scores
from dynamix_hvd.replay.worlds import WorldSpec


TIE = 0.01      # the no-op bonus samples are labelled with (expert_label's default)
TEMPERATURE = 0.02   # soft targets exp(-regret / T) the policy is fitted to (``soft_targets``)
HORIZON = 0     # decisions of causal_safe after each scale when pricing it (0: one interval, expert_label)


def noop_label(regret: np.ndarray, noop: int, bonus: float, pass_index: int | None = None) -> tuple[int, np.ndarray]:
    """The no-op's regret lowered by ``bonus`` (at least 0: a departure must gain more than that),
    the pass action's (``ActionConfig.pass_global``: goodput's own batch, unheld) by half of it where
    the no-op is not among the best (it wins its ties with a fixed scale; where every scale ties, the
    targets stay uniform as without it), and the least-regret scale,
    the one nearest the no-op on ties. Returns (label, regrets)."""
    reg = np.array(regret, dtype=np.float64)
    reg[noop] = max(0.0, float(reg[noop]) - bonus)
    if pass_index is not None and reg[noop] > reg.min() + 1e-12:   # not where the no-op is (one of) the best
        reg[pass_index] -= bonus / 2
        reg = np.maximum(reg - reg.min(), 0.0)
    low = np.flatnonzero(reg <= reg.min() + 1e-12)
    return int(low[np.argmin(np.abs(low - noop))]), reg


def scale_outcomes(env: ReplayEnv) -> np.ndarray:
    """The global batch each global scale would lead to from the env's current state (the live
    decision path on a copy of the controller; nothing of the env changes)."""
    n = env.sim.n
    out = np.empty(len(env.cfg.action.global_scales))
    for j in range(out.size):
        c = copy.deepcopy(env.ctl)
        c.pending = (np.zeros(n), j)
        plan = decide_plan(c, env.state, env.bounds, env.sim.t, env.limits)[0]
        out[j] = float(sum(plan.batch_sizes))
    return out


def expert_label(env: ReplayEnv, tie: float = TIE) -> tuple[int, np.ndarray]:
    """The causal oracle's choice among the policy's global scales, and every scale's regret.

    Regret of scale j: its relative loss against the best scale by ``oracle.causal_scores``
    (1 - rate_j / rate_best; when the best finishes inside the interval, the relative extra time,
    or 1 for a scale that does not finish). The no-op gets a bonus of ``tie`` (a departure from
    goodput must gain more than that). Returns (the least-regret scale, nearest the no-op on
    ties; the regrets after the bonus, >= 0)."""
    Bj = scale_outcomes(env)
    uniq, inv = np.unique(Bj, return_inverse=True)
    score, _ = causal_scores(env.sim, uniq.astype(np.int64))
    s = score[inv]
    best = float(s.max())
    if best >= 1e11:     # the best finishes inside the interval: compare finishing times (1e12 - t)
        t = 1e12 - s
        reg = np.where(s >= 1e11, t / (1e12 - best) - 1.0, 1.0)
    else:
        reg = 1.0 - s / best if best > 0 else np.zeros_like(s)
    return noop_label(np.maximum(reg, 0.0), env.cfg.action.noop_global, tie, env.cfg.action.pass_global)


def _branch(env: ReplayEnv) -> ReplayEnv:
    """A copy of the env whose episode can go on independently (the workload's curves, the
    throughput model, the trace and the world pool are shared, never written)."""
    sim = env.sim
    memo = {id(x): x for x in (env.pool, env.cfg, sim.pm, sim.tp, sim.trace, sim.dyn) if x is not None}
    return copy.deepcopy(env, memo)


def time_to_level(traj: np.ndarray, level: float) -> float:
    """Elapsed time at which a (time, progress) trajectory (progress non-decreasing) first reaches
    ``level`` (linear between the points around it; inf if it never does)."""
    t, p = traj[:, 0], traj[:, 1]
    hit = np.flatnonzero(p >= level - 1e-12)
    if hit.size == 0:
        return math.inf
    i = int(hit[0])
    if i == 0 or p[i] <= p[i - 1]:
        return float(t[i])
    return float(t[i - 1] + (t[i] - t[i - 1]) * (level - p[i - 1]) / (p[i] - p[i - 1]))


CONTINUATIONS = ("causal", "goodput", "policy")   # who decides after the priced scale (lookahead_label)


def policy_action(policy: Any, env: ReplayEnv, obs: np.ndarray) -> np.ndarray:
    """The env action of a policy's deterministic act (``PPOController.act``) on ``obs``."""
    n, cfg = env.sim.n, env.cfg
    rows, g = policy.mlp_extractor.act_rows(obs[:n, 1:])
    return np.concatenate([rows, np.full(cfg.n_max - n, cfg.action.k), [g]])


def lookahead_label(env: ReplayEnv, horizon: int, tie: float = TIE, continuation: str = "causal",
                    policy: Any = None) -> tuple[int, np.ndarray]:
    """``expert_label`` with each scale priced by what it leads to (AggreVaTe, Ross & Bagnell
    2014): the scale is taken through the live decision path on a copy of the env, then the
    ``continuation`` decides the next ``horizon`` intervals: ``causal`` is ``causal_safe``
    (``oracle.causal_safe_step``: the true curves, which the learner never sees), ``goodput``
    the policy's no-op (the goodput controller: labels of one step of policy improvement on
    goodput, a departure priced by what the job does after it when nobody knows the curves),
    ``policy`` the learner's own deterministic act (``policy``; goodput while there is none).
    The branches are compared at the least progress they all reach: regret of scale j =
    t_j / t_best - 1 for the time that took (so a move that strands the run behind the safety
    hold pays for the hold). Scales that lead to the same global batch share a branch."""
    if continuation not in CONTINUATIONS:
        raise ValueError(f"continuation={continuation!r}: expected one of {CONTINUATIONS}")
    if horizon <= 0:
        return expert_label(env, tie)
    Bj = scale_outcomes(env)
    uniq, inv = np.unique(Bj, return_inverse=True)
    grid = candidate_batches(env.sim)
    cfg = env.cfg
    noop = np.concatenate([np.full(cfg.n_max, cfg.action.k), [cfg.action.noop_global]])
    trajs = []
    # the expert continuing a policy that may pass the noise-scale hold (ActionConfig.pass_hold) is not held either
    lim = env.limits.without_hold() if cfg.action.pass_hold else env.limits
    for B in uniq:
        br = _branch(env)
        j = int(np.flatnonzero(Bj == B)[0])
        t0 = br.sim.time
        obs = br.step(np.concatenate([np.full(cfg.n_max, cfg.action.k), [j]]))[0]
        traj = [(0.0, env.sim.P), (br.sim.time - t0, br.sim.P)]
        B_cur = float(sum(br.plan.batch_sizes))
        for _ in range(horizon):
            if br.sim.done:
                break
            if continuation == "causal":
                B_cur = float(causal_safe_step(br.sim, B_cur, grid, lim).sum())
            else:
                obs = br.step(noop if policy is None or continuation == "goodput"
                              else policy_action(policy, br, obs))[0]
            traj.append((br.sim.time - t0, br.sim.P))
        trajs.append(np.asarray(traj))
    level = min(float(tr[-1, 1]) for tr in trajs)
    t = np.array([time_to_level(tr, level) for tr in trajs])
    if level <= env.sim.P + 1e-12:      # no branch made progress: nothing to tell them apart
        t = np.ones_like(t)
    return noop_label((t / t.min() - 1.0)[inv], env.cfg.action.noop_global, tie, env.cfg.action.pass_global)


@dataclass
class Sample:
    obs: np.ndarray      # (N, F + 1) float32, one row per worker plus the mask column
    label: int
    regret: np.ndarray   # (n_global,) every global scale's regret (expert_label)
    world: str


def rollout(env: ReplayEnv, spec: WorldSpec, policy: Any = None, max_decisions: int = 600,
            every: int = 1, tie: float = TIE, horizon: int = HORIZON,
            continuation: str = "causal") -> tuple[list[Sample], float, bool]:
    """One episode in ``spec``'s world driven by the expert (``policy`` None) or by ``policy``
    (deterministic); every ``every``-th state is labelled by the expert (``lookahead_label`` with
    ``horizon`` and ``continuation``, the ``policy`` continuing where that is ``policy``; 0 is
    ``expert_label``). Returns (samples, simulated time, reached)."""
    obs, _ = env.reset(options={"spec": spec, "goodput_s": 1.0, "goodput_decisions": max_decisions // 3 + 1})
    n, cfg = env.sim.n, env.cfg
    samples: list[Sample] = []
    t = 0
    while True:
        label = None
        if policy is None or t % every == 0:      # the expert's label drives its own roll-out
            label, reg = lookahead_label(env, horizon, tie, continuation, policy)
        if t % every == 0:
            samples.append(Sample(obs[:n].astype(np.float32), label, reg.astype(np.float32), spec.label()))
        if policy is None:
            a = np.concatenate([np.full(cfg.n_max, cfg.action.k), [label]])
        else:              # the live controller's deterministic act (PPOController.act)
            a = policy_action(policy, env, obs)
        obs, _, term, trunc, info = env.step(a)
        t += 1
        if term or trunc:
            return samples, float(info["time_s"]), bool(info["reached"])


def _batch(samples: Sequence[Sample]) -> tuple[np.ndarray, np.ndarray]:
    """Observations padded to the batch's largest N (mask column 0 on padding) and labels."""
    F = samples[0].obs.shape[1]
    X = np.zeros((len(samples), max(s.obs.shape[0] for s in samples), F), dtype=np.float32)
    for i, s in enumerate(samples):
        X[i, : s.obs.shape[0]] = s.obs
    return X, np.array([s.label for s in samples], dtype=np.int64)


def soft_targets(regret: np.ndarray, temperature: float) -> np.ndarray:
    """The distribution a policy is fitted to: exp(-regret / temperature), normalised (scales
    whose regret differs by much less than the temperature are equally good targets)."""
    z = -np.asarray(regret, dtype=np.float64) / max(temperature, 1e-9)
    z -= z.max(axis=-1, keepdims=True)
    q = np.exp(z)
    return q / q.sum(axis=-1, keepdims=True)


BALANCES = ("decisions", "worlds")   # what the imitation loss weighs equally (world_weights)
# how the global head is fitted to a sample's regrets (``fit``): ``soft`` the cross-entropy of the soft targets
# exp(-regret / T); ``regret`` a regression of the (centred) logits on -regret / T, so the deterministic act is the
# scale of least *expected* regret given the observation (cost-sensitive, as AggreVaTe's learner)
OBJECTIVES = ("soft", "regret")
REGRET_CLIP = 0.1   # regrets above this (a scale that strands the run) are regressed as this: one outlier, not a scale
PASS_MARGIN = TIE   # a pass head's target: pass where its regret is within this of the no-op's (the no-op's own bonus)


def pass_targets(regret: np.ndarray, noop: int, pass_index: int, margin: float = PASS_MARGIN) -> np.ndarray:
    """The pass head's targets (``ActionConfig.pass_head``), 1.0 where passing the noise-scale hold costs no more
    than ``margin`` over the no-op by the expert's regrets (rows of ``regret``, as samples store them: after the
    no-op's bonus, so the default margin undoes it), else 0.0: where the hold does not bind the two are the same
    batch and the target is 1, so the head learns where passing is harmful rather than where it is needed."""
    reg = np.atleast_2d(np.asarray(regret, dtype=np.float64))
    return (reg[:, pass_index] <= reg[:, noop] + margin + 1e-12).astype(np.float64)


def world_weights(samples: Sequence[Sample], balance: str = "decisions") -> np.ndarray | None:
    """Per-sample loss weights: None (every decision counts once) for ``decisions``; for ``worlds``,
    1 / (the samples of its world), scaled to mean 1, so each training job counts once whatever its
    number of decisions, as each job counts once in the evaluation's geometric mean (a 60-decision
    job's ramp is otherwise outweighed by a 600-decision job's steady state)."""
    if balance not in BALANCES:
        raise ValueError(f"balance={balance!r}: expected one of {BALANCES}")
    if balance == "decisions" or not samples:
        return None
    _, inv, counts = np.unique([s.world for s in samples], return_inverse=True, return_counts=True)
    w = 1.0 / counts[inv]
    return w / w.mean()


def fit(policy: Any, samples: Sequence[Sample], k: int, epochs: int = 20, batch: int = 64,
        lr: float = 1e-3, seed: int = 0, temperature: float = TEMPERATURE,
        weights: np.ndarray | None = None, objective: str = "soft") -> list[float]:
    """Cross-entropy of the global-scale soft targets (``soft_targets`` of the regrets; ``objective``
    ``regret``: the mean squared error of the centred global logits against the centred -regret / T,
    regrets clipped at ``REGRET_CLIP``) plus, per valid row, the cross-entropy of "no change" (the
    actor's logits, ``RowNet.actor_logits``) plus, for a network with a pass head, its binary
    cross-entropy against ``pass_targets``; Adam; each sample's term times its ``weights`` entry when
    given (``world_weights``). Returns the mean loss per epoch."""
    import torch
    import torch.nn.functional as F
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r}: expected one of {OBJECTIVES}")
    net = policy.mlp_extractor
    params = [p for name, p in net.named_parameters() if "_vf" not in name]
    opt = torch.optim.Adam(params, lr=lr)
    rng = np.random.default_rng(seed)
    # batches of similar N (less padding): sort by N, cut, shuffle the batches
    order = np.argsort([s.obs.shape[0] for s in samples], kind="stable")
    losses = []
    for _ in range(epochs):
        cuts = [order[i:i + batch] for i in range(0, order.size, batch)]
        rng.shuffle(cuts)
        tot = 0.0
        for ids in cuts:
            part = [samples[j] for j in ids]
            X, _ = _batch(part)
            reg = np.stack([p.regret for p in part])
            x = torch.as_tensor(X)
            row, glob, pass_logit = net.actor_heads(x)
            m = x[..., 0]
            row_ce = F.cross_entropy(row.reshape(-1, row.shape[-1]), torch.full((row.shape[0] * row.shape[1],), k),
                                     reduction="none").reshape(m.shape)
            if objective == "soft":
                q = torch.as_tensor(soft_targets(reg, temperature), dtype=torch.float32)
                per_glob = F.cross_entropy(glob, q, reduction="none")
            else:
                z = -np.minimum(reg, REGRET_CLIP) / max(temperature, 1e-9)
                z = torch.as_tensor(z - z.mean(axis=-1, keepdims=True), dtype=torch.float32)
                per_glob = ((glob - glob.mean(-1, keepdim=True) - z) ** 2).mean(-1)
            per = per_glob + (row_ce * m).sum(1) / m.sum(1)
            if pass_logit is not None:
                y = torch.as_tensor(pass_targets(reg, *net.pass_indices), dtype=torch.float32)
                per = per + F.binary_cross_entropy_with_logits(pass_logit, y, reduction="none")
            loss = per.mean() if weights is None else (per * torch.as_tensor(weights[ids], dtype=torch.float32)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += float(loss.detach()) * len(ids)
        losses.append(tot / len(samples))
    return losses


def accuracy(policy: Any, samples: Sequence[Sample]) -> float:
    """Share of samples whose deterministic global choice is the label: the global head's, before a pass head
    turns its no-op into the pass (where the hold does not bind the two are one batch, and the label the no-op)."""
    net = policy.mlp_extractor
    hit = sum(int(np.argmax(net.actor_logits_numpy(s.obs[:, 1:])[1]) == s.label) for s in samples)
    return hit / max(1, len(samples))


def draw_worlds(cfg: ReplayEnvConfig, rng: np.random.Generator, count: int) -> list[WorldSpec]:
    return [cfg.worlds.draw(rng) for _ in range(count)]


def save_samples(path: str | Path, samples: Sequence[Sample]) -> None:
    """Samples as plain arrays (rows of every observation stacked, offsets, labels, regrets, world
    labels as text): ``load_samples`` reads them with ``allow_pickle=False``."""
    off = np.cumsum([0] + [s.obs.shape[0] for s in samples])
    np.savez_compressed(path, rows=np.concatenate([s.obs for s in samples]).astype(np.float32), offsets=off,
                        labels=np.array([s.label for s in samples]), regrets=np.stack([s.regret for s in samples]),
                        worlds=np.array([s.world for s in samples], dtype=str))


def load_samples(path: str | Path) -> list[Sample]:
    with np.load(path, allow_pickle=False) as d:
        rows, off, labels, reg, worlds = d["rows"], d["offsets"], d["labels"], d["regrets"], d["worlds"]
    return [Sample(rows[off[i]:off[i + 1]], int(labels[i]), reg[i], str(worlds[i])) for i in range(labels.size)]


def with_observation(samples: Sequence[Sample], cfg: ReplayEnvConfig) -> list[Sample]:
    """Samples seen through ``cfg``'s observation: the columns of its disabled groups zeroed (as
    ``state.build_observation`` does), so samples collected once serve every ablation."""
    mask = np.concatenate([[1.0], cfg.obs.column_mask()]).astype(np.float32)
    if samples and samples[0].obs.shape[1] != mask.size:
        raise ValueError(f"samples have {samples[0].obs.shape[1]} columns; this observation has {mask.size}")
    return [Sample(s.obs * mask, s.label, s.regret, s.world) for s in samples]


def with_noop_bonus(samples: Sequence[Sample], bonus: float, noop: int,
                    pass_index: int | None = None) -> list[Sample]:
    """Samples whose no-op regret is lowered by ``bonus`` more (clipped at 0): a departure must
    gain more than that (samples are labelled with ``expert_label``'s own ``tie``)."""
    out = []
    for s in samples:
        label, r = noop_label(s.regret, noop, bonus, pass_index)
        out.append(Sample(s.obs, label, r, s.world))
    return out


def workload_of(sample: Sample) -> str:
    return sample.world.split("/", 1)[0]


def of_workloads(samples: Sequence[Sample], workloads: Sequence[str]) -> list[Sample]:
    """The samples of the given workloads (a world's label starts with its workload, a name or a
    directory path): a policy trained on some workloads sees nothing of the others (leave-one-out)."""
    prefixes = tuple(w.rstrip("/") + "/" for w in workloads)
    return [s for s in samples if s.world.startswith(prefixes)]


class Trainer:
    """A policy file of the replay env's shape (the SB3 zip the PPO controller loads), fitted
    from scratch to a set of samples."""

    def __init__(self, cfg: ReplayEnvConfig, seed: int = 0, hidden: int = 64, meta: dict[str, Any] | None = None):
        import torch
        from stable_baselines3 import PPO
        from stable_baselines3.common.vec_env import DummyVecEnv

        from dynamix_hvd.agent.replay_train import REPLAY_PPO
        from dynamix_hvd.controllers.policy.net import SharedRowPolicy
        torch.manual_seed(seed)
        torch.set_num_threads(1)
        self.cfg, self.seed, self.hidden = cfg, seed, hidden
        self.env = ReplayEnv(cfg)
        self.dyn = cfg.to_dict()
        self.dyn["imitation"] = dict(meta or {}, expert="causal_safe")
        self.model = PPO(SharedRowPolicy, DummyVecEnv([lambda: self.env]), seed=seed, verbose=0, device="cpu",
                         policy_kwargs=dict(hidden=hidden, dynamix_config=self.dyn), **REPLAY_PPO)
        self._init = {k: v.clone() for k, v in self.model.policy.state_dict().items()}

    @property
    def policy(self) -> Any:
        return self.model.policy

    def fit(self, samples: Sequence[Sample], epochs: int, seed: int = 0, temperature: float = TEMPERATURE,
            balance: str = "decisions", objective: str = "soft") -> list[float]:
        self.model.policy.load_state_dict(self._init)       # from scratch on the aggregate
        return fit(self.model.policy, samples, self.cfg.action.k, epochs=epochs, seed=seed, temperature=temperature,
                   weights=world_weights(samples, balance), objective=objective)

    def save(self, out: str | Path, curve: Sequence[Sequence[float]], meta: dict[str, Any]) -> dict[str, Any]:
        from dynamix_hvd.agent.run_files import save_run
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        return save_run(self.model, out, curve, ["samples", "final_loss", "train_accuracy", "wall_s"],
                        dict(meta, env=self.dyn, seed=self.seed, hidden=self.hidden), _plot_imitation)


def train_imitation(cfg: ReplayEnvConfig, seed: int, out: Path, iters: int = 3, worlds_per_iter: int = 24,
                    epochs: int = 20, hidden: int = 64, tie: float = TIE, max_decisions: int = 600,
                    every: int = 1, verbose: bool = True, command: str = "",
                    samples: Sequence[Sample] = (), horizon: int = HORIZON,
                    save_samples_to: str | Path | None = None, temperature: float = TEMPERATURE,
                    continuation: str = "causal", balance: str = "decisions",
                    objective: str = "soft") -> dict[str, Any]:
    """DAgger with ``iters`` iterations (the first rolls the expert out, unless ``samples``
    already hold expert roll-outs: then every iteration rolls the policy out); saves the policy
    like ``replay_train.train_replay`` (zip + json + curve) and, with ``save_samples_to``, the
    final aggregate (``save_samples``)."""
    if continuation not in CONTINUATIONS:
        raise ValueError(f"train_imitation: continuation={continuation!r}: expected one of {CONTINUATIONS}")
    if horizon < 0 or iters < 0 or worlds_per_iter < 1 or not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"train_imitation: horizon={horizon}, iters={iters}, worlds_per_iter={worlds_per_iter}, "
                         f"temperature={temperature}: need horizon >= 0, iters >= 0, worlds_per_iter >= 1, temperature > 0")
    if balance not in BALANCES:
        raise ValueError(f"train_imitation: balance={balance!r}: expected one of {BALANCES}")
    if objective not in OBJECTIVES:
        raise ValueError(f"train_imitation: objective={objective!r}: expected one of {OBJECTIVES}")
    # a run with the default continuation and balance records what runs before it did (its files stay byte for byte)
    other = ({} if continuation == "causal" else {"continuation": continuation}) | \
        ({} if balance == "decisions" else {"balance": balance}) | \
        ({} if objective == "soft" else {"objective": objective})
    tr = Trainer(cfg, seed, hidden, {"tie": tie, "iters": iters, "worlds_per_iter": worlds_per_iter,
                                     "horizon": horizon, **other})
    rng = np.random.default_rng([seed, 5151])
    given = len(samples)
    samples = of_workloads(samples, cfg.workloads)     # --workloads W1,W2 trains on nothing else
    if given and not samples:
        raise ValueError(f"train_imitation: none of the {given} given samples is of the workloads {list(cfg.workloads)}")
    if verbose and len(samples) < given:
        print(f"  kept {len(samples)} of the {given} given samples: those of {list(cfg.workloads)}", flush=True)
    data: list[Sample] = with_noop_bonus(with_observation(samples, cfg), max(0.0, tie - TIE), cfg.action.noop_global,
                                         cfg.action.pass_global)
    curve: list[tuple[int, float, float, float]] = []
    log: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    start_fit: dict[str, Any] | None = None
    if data:
        losses = tr.fit(data, epochs, seed, temperature, balance, objective)
        start_fit = {"samples": len(data), "final_loss": losses[-1], "train_accuracy": accuracy(tr.policy, data),
                     "wall_s": round(time.perf_counter() - t0, 1)}
        if verbose:
            print(f"  fitted to the {len(data)} given samples: loss {losses[-1]:.4f}, "
                  f"accuracy {start_fit['train_accuracy']:.3f}, {start_fit['wall_s']:.0f}s", flush=True)
    for it in range(iters):
        worlds = draw_worlds(cfg, rng, worlds_per_iter)
        moved = 0
        for spec in worlds:
            s, _, _ = rollout(tr.env, spec, None if (it == 0 and not data) else tr.policy, max_decisions, every, tie,
                              horizon, continuation)
            data.extend(s)
            moved += sum(x.label != cfg.action.noop_global for x in s)
        losses = tr.fit(data, epochs, seed + it, temperature, balance, objective)
        labels = np.bincount([x.label for x in data], minlength=len(cfg.action.global_scales))
        acc = accuracy(tr.policy, data)
        log.append({"iter": it, "worlds": len(worlds), "samples": len(data), "moved_labels": int(moved),
                    "label_counts": labels.tolist(), "final_loss": losses[-1], "train_accuracy": acc,
                    "wall_s": round(time.perf_counter() - t0, 1)})
        curve.append((len(data), losses[-1], acc, time.perf_counter() - t0))
        if verbose:
            print(f"  iter {it}: {len(data)} samples, labels {labels.tolist()}, loss {losses[-1]:.4f}, "
                  f"accuracy {acc:.3f}, {time.perf_counter() - t0:.0f}s", flush=True)
    if save_samples_to is not None:
        save_samples(save_samples_to, data)
    if data:       # the observations it was trained on: the live controller acts only inside them
        from dynamix_hvd.agent.support_fit import global_columns, observation_columns
        from dynamix_hvd.controllers.policy.support import fit as fit_support
        tr.dyn["support"] = fit_support([s.obs[s.obs[:, 0] > 0, 1:] for s in data], observation_columns(tr.dyn),
                                        global_columns(), seed).to_dict()
    method = "imitate (DAgger, expert causal_safe)" if continuation == "causal" else \
        f"imitate (DAgger, continued by {continuation})"
    return tr.save(out, curve, {"world": "replay", "method": method,
                                "iters": iters, "worlds_per_iter": worlds_per_iter, "epochs": epochs, "tie": tie,
                                "horizon": horizon, "temperature": temperature, **other,
                                "start_samples": len(samples), "start_fit": start_fit,
                                "wall_s": round(time.perf_counter() - t0, 1),
                                "dagger": log, "command": command})


def _plot_imitation(curve, path: Path, title: str) -> None:
    if not curve:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    c = np.asarray(curve)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(c[:, 0], c[:, 2], marker="o", label="accuracy on the aggregated labels")
    ax.set_xlabel("samples (DAgger aggregate)")
    ax.set_ylabel("label accuracy")
    ax.set_title(f"imitation of causal_safe: {title}")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
