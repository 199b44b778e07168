"""A fast numpy simulator of a heterogeneous data-parallel cluster, one decision interval per step.

Physics of one interval (K training steps, means reported):

* compute of rank i:   c_i = (alpha_i + beta_i * b_i) * noise,  noise ~ logN(0, sigma / sqrt(K))
* ring allreduce:      a = 2 (N-1)/N * M / min_i bw_i + 2 (N-1) * max_i lat_i   (slowest link bounds the ring)
* overlap:             gradients are reduced while the slowest rank still computes its backward pass;
                       exposed comm = max(a - ov * max_i c_i, 0.05 a)
* step time:           T = max_i c_i + exposed comm + o;   rank i waits T - c_i at the allreduce;
                       o is a fixed per-step framework cost (Horovod negotiation, optimizer, Python),
                       measured live at ~18 ms per step on a 35 ms compute phase: it is what makes
                       very small global batches expensive (more steps, each paying o)
* memory:              b_i <= max_batch_i (the bounds enforce it; a larger b_i would be an OOM)
* statistics:          gradient noise scale phi(p) = phi0 (1 + growth p) grows with progress p;
                       statistical efficiency E(B) = (phi + B_ref) / (phi + B)   (Pollux)
* goodput:             G = B / T * E(B)  (samples/s worth of B_ref-batch progress)
* oracle:              batch split equalising alpha_i + beta_i b_i at B_ref (the balance limit), no noise

Scenario types: ``homogeneous``, ``static_hetero`` (up to ``max_hetero``x compute spread),
``node_slowdown`` (ranks slow down mid-episode, may recover), ``link_degradation`` (a link's
bandwidth drops mid-episode, may recover). Background random events can hit any scenario.

The simulator emits the same ``ClusterState`` records as the live hook; its hot path
(``step``) works on arrays and builds the records only when asked (``cluster_state``).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from dynamix_hvd.controllers.split import equal_time_split
from dynamix_hvd.perfmodel import efficiency, ring_allreduce_s, step_time
from dynamix_hvd.plan import Plan, PlanBounds
from dynamix_hvd.records import NAN, ClusterState, GlobalStats, WorkerStats
from dynamix_hvd.state import RAW_WORKER_FIELDS

SCENARIOS: tuple[str, ...] = ("homogeneous", "static_hetero", "node_slowdown", "link_degradation")
MODEL_FAMILIES: dict[str, tuple[float, float]] = {
    "small": (1.0, 30.0),     # MB of gradients: MLPs, small CNNs
    "large": (60.0, 500.0),   # ResNets, transformers
    "any": (1.0, 500.0),
}


@dataclass(frozen=True)
class SimConfig:
    """Domain-randomisation ranges (each episode draws one cluster from them)."""

    n_workers: tuple[int, int] = (2, 64)                   # drawn log-uniformly
    max_hetero: float = 8.0
    model_family: str = "any"
    bandwidth_gbit: tuple[float, float] = (1.0, 25.0)
    latency_ms: tuple[float, float] = (0.02, 0.5)
    base_batch: tuple[int, int] = (16, 64)
    time_per_sample_ms: tuple[float, float] = (0.5, 8.0)   # fastest rank's beta
    fixed_frac: tuple[float, float] = (0.02, 0.5)          # alpha as a fraction of the base-batch compute
    step_overhead_frac: tuple[float, float] = (0.0, 0.6)   # o as a fraction of the base-batch compute
    cap_mult: tuple[float, float] = (2.0, 6.0)             # max_batch_i / base_batch
    overlap: tuple[float, float] = (0.3, 0.9)
    noise_phi0: tuple[float, float] = (0.25, 4.0)          # phi0 / B_ref
    noise_growth: tuple[float, float] = (1.0, 7.0)
    compute_noise: float = 0.05
    steps_per_decision: int = 20
    episode_len: int = 40
    event_rate: float = 0.02                               # background events per decision
    scenarios: tuple[str, ...] = SCENARIOS
    scenario_weights: tuple[float, ...] | None = None
    gpu_missing_prob: float = 0.3

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_workers", tuple(int(x) for x in self.n_workers))
        object.__setattr__(self, "scenarios", tuple(self.scenarios))
        if self.model_family not in MODEL_FAMILIES:
            raise ValueError(f"model_family={self.model_family!r}; choose one of {sorted(MODEL_FAMILIES)}")
        bad = [s for s in self.scenarios if s not in SCENARIOS]
        if bad:
            raise ValueError(f"unknown scenarios {bad}; choose from {SCENARIOS}")
        lo, hi = self.n_workers
        if not 1 <= lo <= hi:
            raise ValueError(f"n_workers={self.n_workers}: need 1 <= low <= high")
        if self.max_hetero < 1:
            raise ValueError(f"max_hetero={self.max_hetero}: must be >= 1")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "SimConfig":
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return SimConfig(**kw)


@dataclass
class Cluster:
    """One drawn cluster: true parameters (mutable by events)."""

    scenario: str
    base_batch: int
    alpha: np.ndarray          # s per step
    beta: np.ndarray           # s per sample
    caps: np.ndarray           # max batch per rank
    bw: np.ndarray             # bytes/s per link
    lat: np.ndarray            # s per hop
    model_bytes: float
    overlap: float
    phi0: float
    growth: float
    gpu_missing: bool
    overhead: float = 0.0      # s per step, outside compute and allreduce
    events: list[tuple[int, str, np.ndarray, float]] = field(default_factory=list)

    @property
    def n(self) -> int:
        return self.alpha.size

    @property
    def ref_global_batch(self) -> int:
        return self.base_batch * self.n


def _logu(rng: np.random.Generator, lo: float, hi: float, size: Any = None) -> Any:
    return np.exp(rng.uniform(np.log(lo), np.log(hi), size))


def draw_cluster(cfg: SimConfig, rng: np.random.Generator, scenario: str | None = None,
                 n_workers: int | None = None) -> Cluster:
    """Draw one randomised cluster (and its scheduled events) from the config's ranges."""
    if scenario is None:
        w = np.asarray(cfg.scenario_weights or [1.0] * len(cfg.scenarios), dtype=float)
        scenario = cfg.scenarios[int(rng.choice(len(cfg.scenarios), p=w / w.sum()))]
    n = int(n_workers) if n_workers is not None else \
        int(np.clip(np.round(_logu(rng, cfg.n_workers[0], cfg.n_workers[1] + 0.49)), cfg.n_workers[0], cfg.n_workers[1]))
    base = int(rng.integers(cfg.base_batch[0] // 8, cfg.base_batch[1] // 8 + 1) * 8)
    beta0 = _logu(rng, *cfg.time_per_sample_ms) / 1e3
    if scenario == "static_hetero":
        h = rng.uniform(2.0, cfg.max_hetero) if cfg.max_hetero >= 2 else cfg.max_hetero
        slow = _logu(rng, 1.0, h, n)
        slow[rng.integers(n)] = h if n > 1 else 1.0     # make sure the spread is really there
        slow[rng.integers(n)] = 1.0
    elif scenario == "homogeneous":
        slow = rng.uniform(0.97, 1.03, n)
    else:
        slow = _logu(rng, 1.0, min(1.5, cfg.max_hetero), n)
    beta = beta0 * slow
    alpha = rng.uniform(*cfg.fixed_frac) * beta0 * base * np.where(scenario == "homogeneous", 1.0, rng.uniform(0.7, 1.5, n))
    caps = np.maximum(base, np.round(base * rng.uniform(*cfg.cap_mult, n))).astype(int)
    if scenario == "homogeneous":
        caps[:] = int(np.round(base * rng.uniform(*cfg.cap_mult)))
    mb = _logu(rng, *MODEL_FAMILIES[cfg.model_family])
    bw = _logu(rng, *cfg.bandwidth_gbit) * 1.25e8 * (np.ones(n) if scenario == "homogeneous" else _logu(rng, 1.0, 2.0, n))
    lat = _logu(rng, *cfg.latency_ms) / 1e3 * np.ones(n)
    cl = Cluster(
        scenario=scenario, base_batch=base, alpha=alpha, beta=beta, caps=caps, bw=bw, lat=lat,
        model_bytes=mb * 1e6, overlap=float(rng.uniform(*cfg.overlap)),
        phi0=float(rng.uniform(*cfg.noise_phi0)) * base * n, growth=float(rng.uniform(*cfg.noise_growth)),
        gpu_missing=bool(rng.random() < cfg.gpu_missing_prob),
    )
    cl.overhead = float(rng.uniform(*cfg.step_overhead_frac)) * beta0 * base
    T = cfg.episode_len
    if scenario in ("node_slowdown", "link_degradation"):
        kind = "slow" if scenario == "node_slowdown" else "link"
        t0 = int(rng.integers(max(1, T // 6), max(2, (2 * T) // 3)))
        k = int(rng.integers(1, max(1, n // 4) + 1))
        ranks = rng.choice(n, size=k, replace=False)
        f = float(rng.uniform(2.0, 6.0)) if kind == "slow" else float(_logu(rng, 4.0, 20.0))
        cl.events.append((t0, kind, ranks, f))
        if rng.random() < 0.5:
            cl.events.append((int(t0 + rng.integers(5, 16)), kind, ranks, 1.0 / f))
    n_bg = rng.poisson(cfg.event_rate * T) if scenario != "homogeneous" else 0
    for _ in range(n_bg):
        kind = "slow" if rng.random() < 0.5 else "link"
        cl.events.append((int(rng.integers(1, T)), kind, rng.choice(n, size=1), float(rng.uniform(1.5, 4.0))))
    cl.events.sort(key=lambda e: e[0])
    return cl


equalised_split = equal_time_split   # the oracle split is the goodput model's split with true parameters


class ClusterSim:
    """Steps one cluster through decision intervals. ``reset`` draws a new cluster."""

    def __init__(self, config: SimConfig = SimConfig(), seed: int | None = None) -> None:
        self.cfg = config
        self.rng = np.random.default_rng(seed)
        self.cluster: Cluster | None = None
        self.t = 0

    # ----------------------------------------------------------------- episode
    def reset(self, seed: int | None = None, scenario: str | None = None,
              n_workers: int | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.cluster = draw_cluster(self.cfg, self.rng, scenario, n_workers)
        self.t = 0
        self._ev = 0
        self._oracle: tuple[np.ndarray, float] | None = None
        self._comm: float | None = None
        self.prev_B = float(self.cluster.ref_global_batch)
        self.last_loss = 2.5

    def bounds(self, deadband: float = 0.05) -> PlanBounds:
        cl = self._c()
        return PlanBounds(max_batch=tuple(int(c) for c in cl.caps), min_batch=max(1, cl.base_batch // 8),
                          quantum=1, max_global_batch=4 * cl.ref_global_batch,
                          min_global_batch=max(1, cl.ref_global_batch // 4), deadband=deadband)

    def _c(self) -> Cluster:
        if self.cluster is None:
            raise RuntimeError("call reset() before using the simulator")
        return self.cluster

    @property
    def progress(self) -> float:
        return min(1.0, self.t / self.cfg.episode_len)

    @property
    def done(self) -> bool:
        return self.t >= self.cfg.episode_len

    def noise_scale(self) -> float:
        cl = self._c()
        return cl.phi0 * (1.0 + cl.growth * self.progress)

    def true_speeds(self) -> np.ndarray:
        """Per-rank samples/s at the base batch (what the bench's oracle would be told)."""
        cl = self._c()
        return cl.base_batch / (cl.alpha + cl.beta * cl.base_batch)

    def oracle(self) -> tuple[np.ndarray, float]:
        """(oracle split of B_ref, its goodput without noise). Cached until the next event."""
        if self._oracle is None:
            cl = self._c()
            bref = float(cl.ref_global_batch)
            b = equalised_split(cl.alpha, cl.beta, bref, max(1, cl.base_batch // 8), cl.caps.astype(float))
            step = self._step_time(cl.alpha + cl.beta * b)
            self._oracle = (b, b.sum() / step)
        return self._oracle

    def _comm_time(self) -> float:
        cl = self._c()
        n = cl.n
        if n == 1:
            return 0.0
        # the slowest link bounds every round (perfmodel.ring_allreduce_s with equal hop latencies)
        return ring_allreduce_s(cl.model_bytes, cl.bw, np.full(n, 0.5 * float(cl.lat.max())))

    def _step_time(self, compute: np.ndarray, comm: float | None = None) -> float:
        a = self._comm_time() if comm is None else comm
        mc = float(compute.max())
        cl = self._c()
        return float(step_time(mc, a, cl.overlap, cl.overhead))

    def _apply_events(self) -> None:
        cl = self._c()
        while self._ev < len(cl.events) and cl.events[self._ev][0] <= self.t:
            _, kind, ranks, f = cl.events[self._ev]
            if kind == "slow":
                cl.beta[ranks] *= f
            else:
                cl.bw[ranks] /= f
            self._ev += 1
            self._oracle = None
            self._comm = None

    def statistical_efficiency(self, B: float) -> float:
        return efficiency(B, self._c().ref_global_batch, self.noise_scale())

    # ------------------------------------------------------------------ step
    def step(self, sizes: Sequence[int]) -> dict[str, Any]:
        """Run one decision interval with per-rank ``sizes``; return raw arrays and truths."""
        cl = self._c()
        self._apply_events()
        b = np.asarray(sizes, dtype=np.float64)
        n, K = cl.n, self.cfg.steps_per_decision
        sig = self.cfg.compute_noise
        z = self.rng.standard_normal(2 * n + 4)
        compute = (cl.alpha + cl.beta * b) * np.exp(z[:n] * (sig / math.sqrt(K)) + 0.5 * sig * sig)
        if self._comm is None:
            self._comm = self._comm_time()
        comm = self._comm * math.exp(0.03 * z[-1])
        step = self._step_time(compute, comm)
        B = float(b.sum())
        nbytes_s = (2.0 * (n - 1) / n * cl.model_bytes if n > 1 else 0.0) / step
        full = np.full(n, 1.0)
        cpu = compute / step + 0.02 * z[n:2 * n]
        np.clip(cpu, 0.0, 1.0, out=cpu)
        gpu = full * NAN if cl.gpu_missing else 0.9 * compute / step
        raw = np.column_stack((b, cl.caps, compute, full * step, step - compute, full * comm, full * nbytes_s,
                               full * nbytes_s, cl.bw, cpu, gpu, 1.0 - (0.15 + 0.8 * b / cl.caps)))
        progress = self.progress
        phi = cl.phi0 * (1.0 + cl.growth * progress)
        eff = efficiency(B, cl.ref_global_batch, phi)
        thr = B / step
        _, g_oracle = self.oracle()
        # loss falls faster with more efficient progress; val loss turns up when B >> phi
        loss_trend = -0.04 * eff * (1.0 - 0.7 * progress) + 0.005 * z[-2]
        gen_excess = max(0.0, math.log2(B / (2.0 * phi)))
        val_trend = loss_trend + 0.03 * gen_excess + 0.005 * z[-3]
        gv_trend = self.prev_B / B - 1.0 + 0.02 * z[-4]
        self.last_loss *= math.exp(loss_trend)
        out = {
            "raw": raw, "step_s": step, "throughput": thr, "stat_eff": eff, "goodput": thr * eff,
            "oracle_goodput": g_oracle, "noise_scale": phi, "global_batch": B, "prev_global_batch": self.prev_B,
            "loss": self.last_loss, "loss_trend": loss_trend, "val_loss_trend": val_trend,
            "grad_var_trend": gv_trend, "progress": progress, "idle": (compute.max() - compute) / step,
            "ref_global_batch": float(cl.ref_global_batch),
        }
        self.prev_B = B
        self.t += 1
        return out

    # --------------------------------------------------------------- records
    def global_stats(self, out: Mapping[str, Any]) -> GlobalStats:
        return GlobalStats(step=self.t * self.cfg.steps_per_decision, progress=out["progress"],
                           noise_scale=out["noise_scale"], loss=out["loss"], loss_trend=out["loss_trend"],
                           # this simulator hands out the true noise scale: exact, stable
                           noise_scale_rel_err=0.0, noise_scale_stable=True,
                           grad_var_trend=out["grad_var_trend"], val_loss=NAN, val_loss_trend=out["val_loss_trend"],
                           samples_per_s=out["throughput"])

    def cluster_state(self, plan: Plan, out: Mapping[str, Any], last_action: np.ndarray | None = None) -> ClusterState:
        """The records the live hook would have produced for this interval."""
        raw = out["raw"]
        workers = []
        for r in range(raw.shape[0]):
            vals = {name: float(raw[r, j]) for j, name in enumerate(RAW_WORKER_FIELDS)}
            vals["batch_size"], vals["max_batch"] = int(vals["batch_size"]), int(vals["max_batch"])
            workers.append(WorkerStats(rank=r, steps=self.cfg.steps_per_decision, loss=out["loss"], **vals))
        return ClusterState(plan=plan, workers=workers, glob=self.global_stats(out), last_action=last_action)


def family_config(base: SimConfig = SimConfig(), **overrides: Any) -> SimConfig:
    """A copy of ``base`` with some fields replaced (e.g. model_family="large", n_workers=(2, 8))."""
    return replace(base, **overrides)
