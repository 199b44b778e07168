"""Randomised replay worlds for training a policy: the measured workloads and speed traces, and
synthetic perturbations of them, so a policy does not memorise the shipped four.

A ``WorldSpec`` fixes one world (workload, world size N, speed-trace family, perturbation
parameters, seed); ``build_sim`` turns it into a ``ReplaySim``. Perturbations (all drawn per
world by ``WorldDraw.draw``; ``Perturbation()`` = the measured workload unchanged):

* ``sample_scale``: every sample count to every metric level x s (rescales the sample axis);
* ``batch_warp`` (g0, g1): each metric level's segment costs ``(B_c / B_min) ** g_k`` more samples
  on the run at measured batch B_c, ``g_k = g0 + g1 k / K`` (changes how much larger batches pay
  in samples, differently early and late: warps the curves);
* ``gns_shift``: the true noise scale x exp(shift), drawn as -3 x (g0 + g1/2) (larger batches that
  pay more samples come with a smaller noise scale) plus an independent error in [-0.4, 0.4];
  ``gns_sigma_mult``: its estimator noise x m;
* ``compute_scale`` / ``sync_scale``: the measured compute / sync times x a / x c;
* ``cap_frac``: the memory cap lowered to the largest measured local batch <= frac x cap.

Speed-trace families: ``none``, PAI per-worker files, the CoV table, and ``synthetic``: a
per-world generated per-worker series (``synthetic_trace``) with transient stragglers (slowdowns
of random length) and lasting ones (from a random sample to the end), the kind of straggler a
policy must tell apart.
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Sequence

import numpy as np

from dynamix_hvd.replay.progress import ProgressModel, build_progress
from dynamix_hvd.replay.sim import GNS_MODELS, LOSS_NOISE, ReplaySim
from dynamix_hvd.replay.speeds import SpeedTrace, load_speed_trace
from dynamix_hvd.replay.throughput import SYNC_MODELS, ThroughputModel, build_throughput

SHIPPED_WORKLOADS = ("bert", "cifar10", "deepspeech2", "ncf")
TRACE_FAMILIES = ("none", "job_2_norm", "job_3_norm", "cov:coefficient_variation", "synthetic")


@dataclass(frozen=True)
class Perturbation:
    sample_scale: float = 1.0
    batch_warp: tuple[float, float] = (0.0, 0.0)
    gns_shift: float = 0.0
    gns_sigma_mult: float = 1.0
    compute_scale: float = 1.0
    sync_scale: float = 1.0
    cap_frac: float = 1.0

    @property
    def identity(self) -> bool:
        return self == Perturbation()


@dataclass(frozen=True)
class WorldSpec:
    workload: str
    n: int
    trace: str
    seed: int
    pert: Perturbation = field(default_factory=Perturbation)
    gns_model: str = "run"          # ReplaySim(gns_model=...): how the measured noise scale moves
    loss_noise: float = LOSS_NOISE  # ReplaySim(loss_noise=...): the loss trend's observation noise
    sync_model: str = "rank"        # ReplaySim(sync_model=...): whose compute hides the allreduce

    def __post_init__(self) -> None:
        if self.gns_model not in GNS_MODELS:
            raise ValueError(f"gns_model={self.gns_model!r}: expected one of {GNS_MODELS}")
        if self.sync_model not in SYNC_MODELS:
            raise ValueError(f"sync_model={self.sync_model!r}: expected one of {SYNC_MODELS}")

    def key(self) -> tuple:
        return (self.workload, self.n, self.trace, self.seed, self.pert, self.gns_model, self.loss_noise, self.sync_model)

    def label(self) -> str:
        return (f"{self.workload}/{self.trace}/N={self.n}/s{self.seed}" + ("" if self.pert.identity else "/pert")
                + ("" if self.gns_model == "run" else f"/gns={self.gns_model}")
                + ("" if self.loss_noise == LOSS_NOISE else f"/loss_noise={self.loss_noise:.3g}")
                + ("" if self.sync_model == "rank" else f"/sync={self.sync_model}"))


# ---------------------------------------------------------------------- perturbations
def perturb_progress(pm: ProgressModel, p: Perturbation) -> ProgressModel:
    if p.sample_scale == 1.0 and p.batch_warp == (0.0, 0.0) and p.gns_shift == 0.0 and p.gns_sigma_mult == 1.0:
        return pm
    K = pm.n_levels
    with np.errstate(invalid="ignore"):
        seg = np.diff(pm.cum, axis=1)                               # (C, K)
    seg = np.where(np.isfinite(pm.cum[:, 1:]), seg, math.inf)       # inf = unreachable
    g = p.batch_warp[0] + p.batch_warp[1] * np.arange(1, K + 1) / K
    seg = seg * (pm.batches / pm.batches[0])[:, None] ** g[None, :] * p.sample_scale
    cum = np.concatenate([np.zeros((seg.shape[0], 1)), np.cumsum(seg, axis=1)], axis=1)
    return replace(pm, cum=cum, log_ratio=pm.log_ratio + p.gns_shift, gns_sigma=pm.gns_sigma * p.gns_sigma_mult)


def with_cap(tp: ThroughputModel, cap: int) -> ThroughputModel:
    """The model with its memory cap lowered to ``cap`` (a grid point; the grid keeps >= 2 points)."""
    keep = tp.grid <= cap
    keep[:2] = True
    grid = tp.grid[keep]
    cap = int(grid[-1])
    bs = np.arange(cap + 1, dtype=float)
    idx = np.clip(np.searchsorted(grid, bs, side="right") - 1, 0, grid.size - 2)
    w = np.clip((bs - grid[idx]) / (grid[idx + 1] - grid[idx]), 0.0, 1.0)
    return ThroughputModel(tp.n, grid, tp.compute[keep], tp.sync[keep], idx.astype(np.int64), w, tp.timing_sigma,
                           tp.sync_model)


def perturb_throughput(tp: ThroughputModel, p: Perturbation) -> ThroughputModel:
    out = tp
    if p.compute_scale != 1.0 or p.sync_scale != 1.0:
        out = replace(out, compute=out.compute * p.compute_scale, sync=out.sync * p.sync_scale)
    if p.cap_frac < 1.0:
        out = with_cap(out, int(math.floor(p.cap_frac * out.cap)))
    return out


# ---------------------------------------------------------------------- synthetic stragglers
def synthetic_trace(n: int, rng: np.random.Generator, length: int = 1500) -> SpeedTrace:
    """Per-worker relative times (length samples x n workers, one sample = 10 steps): a small
    static imbalance, transient slowdowns (Poisson starts, geometric lengths, factors 1.3-4x) and,
    with probability 1/2, lasting stragglers from a random sample on."""
    base = np.exp(rng.normal(0.0, rng.uniform(0.0, 0.08), n))
    s = np.tile(base, (length, 1))
    rate = math.exp(rng.uniform(math.log(5e-4), math.log(2e-2)))
    mean_len = math.exp(rng.uniform(math.log(3), math.log(80)))
    for w in range(n):
        for t0 in np.flatnonzero(rng.random(length) < rate):
            d = int(rng.geometric(1.0 / mean_len))
            s[t0:t0 + d, w] *= math.exp(rng.uniform(math.log(1.3), math.log(4.0)))
    if rng.random() < 0.5:
        k = int(rng.integers(1, max(1, n // 4) + 1))
        for w in rng.choice(n, size=k, replace=False):
            s[int(rng.integers(length)):, w] *= math.exp(rng.uniform(math.log(1.5), math.log(4.0)))
    s *= rng.lognormal(0.0, 0.02, s.shape)           # per-sample jitter
    return SpeedTrace("pai", "synthetic", series=s, stride=10)


# ---------------------------------------------------------------------- building worlds
@functools.lru_cache(maxsize=16)
def _workload(name: str):
    from dynamix_hvd.replay.runner import resolve_workload
    from dynamix_hvd.traces import load_pollux
    wl = load_pollux(resolve_workload(name))
    return wl, build_progress(wl)


@functools.lru_cache(maxsize=256)
def _throughput(name: str, n: int) -> ThroughputModel:
    return build_throughput(_workload(name)[0].throughput, n)


@functools.lru_cache(maxsize=16)
def _trace(spec: str) -> SpeedTrace:
    from dynamix_hvd.replay.runner import resolve_trace
    return load_speed_trace(resolve_trace(spec))


def build_sim(spec: WorldSpec) -> ReplaySim:
    """The ReplaySim of a world (call ``sim.reset(spec.seed)`` to start it)."""
    pm = perturb_progress(_workload(spec.workload)[1], spec.pert)
    tp = perturb_throughput(_throughput(spec.workload, spec.n), spec.pert)
    if spec.trace == "synthetic":
        trace = synthetic_trace(spec.n, np.random.default_rng([spec.seed, 11]))
    else:
        trace = _trace(spec.trace)
    return ReplaySim(pm, tp, trace, spec.n, gns_model=spec.gns_model, loss_noise=spec.loss_noise,
                     sync_model=spec.sync_model)


WARP_TOP = 0.25    # draw_perturbation: the batch warp's first exponent is drawn below this


def _as_float(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


@dataclass(frozen=True)
class PerturbRange:
    """The ranges ``draw_perturbation`` draws from where a recipe may widen them (``train-policy --warp-min``,
    ``--gns-sigma-max``; session 77). The batch warp multiplies the samples a level needs at global batch B by
    (B / B_0)^g, g rising from ``warp[0]`` to ``warp[0] + warp[1]`` over the levels, ``warp[0]`` uniform in
    [``warp_min``, WARP_TOP); the noise-scale measurement's spread is the workload's x a factor log-uniform in
    [0.5, ``gns_sigma_max``]. The defaults are every earlier recipe's draws. Lower ``warp_min`` draws workloads
    whose large batches cost few more samples (ncf's curves are flat over 128x its batch, YOLOv3's over 16x;
    with g >= -0.3 no perturbed bert, cifar10 or deepspeech2 comes near), higher ``gns_sigma_max`` ones whose
    noise-scale estimate stays unstable longer (ncf's spread is 0.57, cifar10's 0.05)."""
    warp_min: float = -0.15
    gns_sigma_max: float = 2.0

    def __post_init__(self) -> None:
        warp, sigma = _as_float(self.warp_min), _as_float(self.gns_sigma_max)
        if not -1.0 <= warp < WARP_TOP:
            raise ValueError(f"warp_min={self.warp_min!r}: expected a number in [-1, {WARP_TOP:g})")
        if not 0.5 < sigma <= 100.0:
            raise ValueError(f"gns_sigma_max={self.gns_sigma_max!r}: expected a number in (0.5, 100]")
        object.__setattr__(self, "warp_min", warp)
        object.__setattr__(self, "gns_sigma_max", sigma)

    def to_dict(self) -> dict[str, float]:
        """The fields that differ from the default (empty for the default: earlier policy files unchanged)."""
        return {k: v for k, v in asdict(self).items() if v != getattr(PerturbRange(), k)}

    @classmethod
    def from_dict(cls, d: Any, where: str = "perturb_range") -> "PerturbRange":
        """From ``to_dict``'s form; an unknown key or a bad value raises ValueError naming ``where``."""
        if d is None:
            return cls()
        keys = [f.name for f in fields(cls)]
        if not isinstance(d, dict) or set(d) - set(keys):
            raise ValueError(f"{where}: expected a table with keys among {', '.join(keys)}, got {d!r}")
        try:
            return cls(**d)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None


def draw_perturbation(rng: np.random.Generator, strength: float = 1.0,
                      ranges: PerturbRange = PerturbRange()) -> Perturbation:
    """A random perturbation of a workload, from ``ranges`` (``PerturbRange``)."""
    def logu(lo: float, hi: float) -> float:
        return float(math.exp(rng.uniform(math.log(lo), math.log(hi)) * strength))
    warp = (float(rng.uniform(ranges.warp_min, WARP_TOP) * strength), float(rng.uniform(-0.15, 0.3) * strength))
    return Perturbation(
        sample_scale=logu(0.5, 2.0),
        batch_warp=warp,
        # the noise scale follows the warp (large batches that pay more samples = a smaller noise
        # scale, as the Pollux efficiency model has it), plus an independent error
        gns_shift=float(-3.0 * (warp[0] + 0.5 * warp[1]) + rng.uniform(-0.4, 0.4) * strength),
        gns_sigma_mult=logu(0.5, ranges.gns_sigma_max),
        compute_scale=logu(0.5, 2.0),
        sync_scale=logu(0.33, 3.0),
        cap_frac=1.0 if rng.random() < 0.6 else float(rng.uniform(0.25, 1.0)),
    )


@dataclass(frozen=True)
class WorldDraw:
    """How training worlds are drawn (``draw``): workload and trace uniform, N log-uniform in ``n_range``, a
    perturbation from ``ranges`` with probability ``perturb_prob``, the noise-scale model, the loss trend's
    observation noise (``loss_noise`` (lo, hi): log-uniform in it, drawn last, so without it the draws are
    those of earlier sessions; None: ``sim.LOSS_NOISE``) and the sync model. One object for the training
    env's pool, imitation's worlds and the support's roll-outs, recorded in a policy's ``dynamix_config``
    (``to_config``) and read back from it (``from_config``), so a setting added here reaches all of them."""
    workloads: tuple[str, ...] = SHIPPED_WORKLOADS
    traces: tuple[str, ...] = TRACE_FAMILIES
    n_range: tuple[int, int] = (2, 64)
    perturb_prob: float = 0.7
    gns_model: str = "run"
    loss_noise: tuple[float, float] | None = None
    sync_model: str = "rank"
    ranges: PerturbRange = field(default_factory=PerturbRange)

    def __post_init__(self) -> None:
        object.__setattr__(self, "workloads", tuple(self.workloads))
        object.__setattr__(self, "traces", tuple(self.traces))
        if not self.workloads or not all(isinstance(w, str) and w for w in self.workloads):
            raise ValueError(f"workloads={self.workloads!r}: expected one or more names")
        if not self.traces or not all(isinstance(t, str) and t for t in self.traces):
            raise ValueError(f"traces={self.traces!r}: expected one or more trace families")
        try:
            lo, hi = (int(x) for x in self.n_range)
        except (TypeError, ValueError):
            raise ValueError(f"n_range={self.n_range!r}: expected (lo, hi)") from None
        if not 1 <= lo <= hi:
            raise ValueError(f"n_range={self.n_range!r}: expected 1 <= lo <= hi")
        object.__setattr__(self, "n_range", (lo, hi))
        if not 0.0 <= float(self.perturb_prob) <= 1.0:
            raise ValueError(f"perturb_prob={self.perturb_prob!r}: expected a probability in [0, 1]")
        object.__setattr__(self, "perturb_prob", float(self.perturb_prob))
        if self.gns_model not in GNS_MODELS:
            raise ValueError(f"gns_model={self.gns_model!r}: expected one of {GNS_MODELS}")
        if self.sync_model not in SYNC_MODELS:
            raise ValueError(f"sync_model={self.sync_model!r}: expected one of {SYNC_MODELS}")
        if self.loss_noise is not None:
            object.__setattr__(self, "loss_noise", check_loss_noise(self.loss_noise))
        if not isinstance(self.ranges, PerturbRange):
            raise ValueError(f"ranges={self.ranges!r}: expected a PerturbRange")

    def draw(self, rng: np.random.Generator, seed_base: int = 1_000_000) -> WorldSpec:
        """One world; its seed from ``seed_base`` up (evaluation uses seeds below it)."""
        wl = str(self.workloads[int(rng.integers(len(self.workloads)))])
        tr = str(self.traces[int(rng.integers(len(self.traces)))])
        lo, hi = self.n_range
        n = int(np.clip(round(math.exp(rng.uniform(math.log(lo), math.log(hi + 0.49)))), lo, hi))
        pert = draw_perturbation(rng, ranges=self.ranges) if rng.random() < self.perturb_prob else Perturbation()
        seed = int(seed_base + rng.integers(1 << 30))
        noise = LOSS_NOISE
        if self.loss_noise is not None:
            lo_n, hi_n = self.loss_noise
            noise = float(math.exp(rng.uniform(math.log(lo_n), math.log(hi_n))))
        return WorldSpec(wl, n, tr, seed, pert, self.gns_model, noise, self.sync_model)

    def to_config(self) -> dict[str, Any]:
        """The ``dynamix_config`` entries (the optional settings only when not their default, so the files of
        policies trained without them are as they were)."""
        return {"workloads": list(self.workloads), "traces": list(self.traces), "n_range": list(self.n_range),
                "perturb_prob": self.perturb_prob, "gns_model": self.gns_model,
                **({"loss_noise": list(self.loss_noise)} if self.loss_noise is not None else {}),
                **({"sync_model": self.sync_model} if self.sync_model != "rank" else {}),
                **({"perturb_range": self.ranges.to_dict()} if self.ranges.to_dict() else {})}

    @classmethod
    def from_config(cls, cfg: dict[str, Any], where: str = "dynamix_config") -> "WorldDraw":
        """The draw a policy with ``dynamix_config`` ``cfg`` was trained with (``to_config``'s entries; a missing
        one is its default, as in files written before it existed); a bad value raises ValueError naming
        ``where`` and the key."""
        default = cls()
        try:
            return cls(tuple(cfg.get("workloads") or default.workloads), tuple(cfg.get("traces") or default.traces),
                       tuple(cfg.get("n_range", default.n_range)), cfg.get("perturb_prob", default.perturb_prob),
                       str(cfg.get("gns_model", default.gns_model)), cfg.get("loss_noise"),
                       str(cfg.get("sync_model", default.sync_model)),
                       PerturbRange.from_dict(cfg.get("perturb_range"), f"{where}.perturb_range"))
        except (TypeError, ValueError) as e:
            msg = str(e)
            raise ValueError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def parse_loss_noise(text: str | None) -> tuple[float, float] | None:
    """``--loss-noise LO,HI`` as a range (None or empty: off); a bad one raises ValueError naming it."""
    if not text:
        return None
    try:
        return check_loss_noise(tuple(float(x) for x in text.split(",")))
    except ValueError:
        raise ValueError(f"--loss-noise {text!r}: expected LO,HI with 0 < LO <= HI (e.g. 0.005,0.06)") from None


def check_loss_noise(loss_noise: Sequence[float]) -> tuple[float, float]:
    """(lo, hi) of a loss-noise range, checked: 0 < lo <= hi."""
    try:
        lo, hi = (float(x) for x in loss_noise)
    except (TypeError, ValueError):
        raise ValueError(f"loss_noise={loss_noise!r}: expected (lo, hi)") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
        raise ValueError(f"loss_noise={loss_noise!r}: expected 0 < lo <= hi")
    return lo, hi
