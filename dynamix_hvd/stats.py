"""Statistical-efficiency indicators: gradient noise scale for unequal per-rank batches,
loss trend and gradient-variance trend. Pure numpy; the hook feeds it per-interval sums.

Gradient noise scale (McCandlish et al. 2018, appendix A), generalised to unequal b_i.
With per-sample gradient covariance Sigma, S = tr(Sigma) and G2 = |E g|^2, the mean gradient
over b samples satisfies E|g_b|^2 = G2 + S/b. Each step gives
  * the local mean gradients g_i of the N ranks with b_i > 0 (squared norms captured before
    Horovod's in-place allreduce), and
  * the global mean gradient G = sum_i (b_i/B) g_i over B = sum_i b_i.
Let A = sum_i (b_i/B) |g_i|^2. Then E[A] = G2 + N S / B and E|G|^2 = G2 + S / B, so
    S_hat  = B (A - |G|^2) / (N - 1)
    G2_hat = |G|^2 - S_hat / B
are unbiased (N >= 2). With equal b_i this is exactly McCandlish's two-batch-size estimator
with B_small = b, B_big = B. Numerator and denominator are smoothed separately (EMA) and the
noise scale is B_simple = S_ema / G2_ema, in samples.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dynamix_hvd.perfmodel import efficiency

NAN = float("nan")


def gns_step_estimates(weighted_local_sq: float, global_sq: float, global_batch: int,
                       n_ranks: int) -> tuple[float, float]:
    """(S_hat, G2_hat) from one step: weighted_local_sq = sum_i (b_i/B)|g_i|^2."""
    if n_ranks < 2 or global_batch <= 0:
        return NAN, NAN
    s = global_batch * (weighted_local_sq - global_sq) / (n_ranks - 1)
    g2 = global_sq - s / global_batch
    return s, g2


@dataclass
class NoiseScaleEstimator:
    """EMA of S and G2 estimates; ``noise_scale`` = S/G2 (NaN until both are positive).

    It also tracks how much the per-interval estimates scatter (an EMA of their squared
    deviation from the running means) and reports ``rel_err``: the relative standard error of
    the noise scale, by the delta method on S_ema / G2_ema with each EMA's effective sample size
    ``min(updates, (1 + beta) / (1 - beta))``. The estimate is ``stable`` once it has
    ``min_updates`` intervals and ``rel_err <= max_rel_err``; controllers change the global
    batch only on a stable estimate (a noisy one read 165-225 on identical ranks and sent the
    global batch from 64 to 256)."""

    beta: float = 0.9
    s_ema: float = NAN
    g2_ema: float = NAN
    updates: int = 0
    s_var: float = 0.0          # EMA of (s - s_ema)^2
    g2_var: float = 0.0         # EMA of (g2 - g2_ema)^2
    min_updates: int = 4
    max_rel_err: float = 0.25

    def update(self, s: float, g2: float, weight: float = 1.0) -> None:
        if not (math.isfinite(s) and math.isfinite(g2)):
            return
        b = self.beta ** max(weight, 1e-9)
        if self.updates == 0:
            self.s_ema, self.g2_ema = s, g2
            self.s_var = self.g2_var = 0.0
        else:
            ds, dg = s - self.s_ema, g2 - self.g2_ema
            self.s_ema = b * self.s_ema + (1 - b) * s
            self.g2_ema = b * self.g2_ema + (1 - b) * g2
            # West's EMA variance: the deviation from the old mean, weighted as the new point
            self.s_var = b * (self.s_var + (1 - b) * ds * ds)
            self.g2_var = b * (self.g2_var + (1 - b) * dg * dg)
        self.updates += 1

    @property
    def noise_scale(self) -> float:
        if self.updates == 0 or not (self.g2_ema > 0 and self.s_ema > 0):
            return NAN
        return self.s_ema / self.g2_ema

    @property
    def rel_err(self) -> float:
        """Relative standard error of ``noise_scale``; NaN before two updates or without a
        positive estimate (then it is not usable at all)."""
        if self.updates < 2 or not (self.g2_ema > 0 and self.s_ema > 0):
            return NAN
        n_eff = min(float(self.updates), (1.0 + self.beta) / max(1.0 - self.beta, 1e-9))
        # the EMA variance starts from 0: de-bias it (1 - beta^(n-1) of its weight is filled)
        fill = max(1.0 - self.beta ** (self.updates - 1), 1e-9)
        rs = math.sqrt(max(self.s_var, 0.0) / fill / n_eff) / self.s_ema
        rg = math.sqrt(max(self.g2_var, 0.0) / fill / n_eff) / self.g2_ema
        return math.sqrt(rs * rs + rg * rg)

    @property
    def stable(self) -> bool:
        return noise_scale_stable(self.noise_scale, self.rel_err, self.updates, self.min_updates, self.max_rel_err)

    @property
    def growth_room(self) -> float:
        return growth_room(self.noise_scale, self.rel_err, self.updates, self.min_updates)

    @property
    def grad_variance(self) -> float:
        """tr(Sigma) estimate: the per-sample gradient variance."""
        return self.s_ema if self.updates else NAN

    def state_dict(self) -> dict[str, Any]:
        return {"beta": float(self.beta), "s_ema": float(self.s_ema), "g2_ema": float(self.g2_ema),
                "updates": int(self.updates), "s_var": float(self.s_var), "g2_var": float(self.g2_var)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.beta, self.s_ema, self.g2_ema, self.updates = (
            float(d["beta"]), float(d["s_ema"]), float(d["g2_ema"]), int(d["updates"]))
        self.s_var, self.g2_var = float(d.get("s_var", 0.0)), float(d.get("g2_var", 0.0))


def noise_scale_stable(noise_scale: float, rel_err: float, updates: int = 1_000_000, min_updates: int = 4,
                       max_rel_err: float = 0.25) -> bool:
    """True when a noise-scale estimate may drive the global batch: positive, from at least
    ``min_updates`` intervals, with a relative standard error of at most ``max_rel_err``.
    NaN ``rel_err`` (unknown confidence) is not stable."""
    return (math.isfinite(noise_scale) and noise_scale > 0 and updates >= min_updates
            and math.isfinite(rel_err) and rel_err <= max_rel_err)


GROWTH_Z = 2.0          # the pessimistic noise scale: phi x exp(-GROWTH_Z x rel_err)
GROWTH_MARGIN = 3.0     # growth without a stable estimate only to B <= that / GROWTH_MARGIN (10 until session 51)


def growth_room(noise_scale: float, rel_err: float, updates: int = 1_000_000, min_updates: int = 4,
                z: float = GROWTH_Z, margin: float = GROWTH_MARGIN) -> float:
    """The largest global batch an estimate that is not ``stable`` still supports growing to: its
    pessimistic value ``phi x exp(-z x rel_err)`` divided by ``margin`` (at B <= phi / 3 a batch keeps
    at least 75% of its statistical efficiency, ``E >= phi / (phi + B)``; goodput's robust gain still
    decides whether growing within that room pays). Session 51 measured the margin in the replay
    (`benchmarks/goodput_gap.py --modes margin3`, 10 seeds): goodput with 3 instead of 10 is 0.978x the
    margin-10 goodput over the 24 shipped cells (ncf 0.916x, bert 0.997x, cifar10 and deepspeech2 1.000x,
    largest cell 1.006x), 0.985x over the 36 held-out pairing cells with one workload's curves on ncf's
    steps or ncf's on another's (largest cell 1.025x; over all 120 pairing cells 0.995x, one cell 1.048x)
    and 1.000x on the held-out YOLOv3; with no margin at all (the hold off) ncf is 0.852x but a pairing
    cell 1.066x. 0 (no growth)
    before ``min_updates`` intervals, with an unknown error or one above 100%. A noise scale
    whose estimate jumps with every batch change (the replay's ncf traces: 4e4-1e6 between runs)
    is rarely stable, yet its lower bound is orders of magnitude above the batch."""
    if not (updates >= min_updates and math.isfinite(noise_scale) and noise_scale > 0
            and math.isfinite(rel_err) and 0 <= rel_err <= 1.0):
        return 0.0
    return noise_scale * math.exp(-z * rel_err) / margin


@dataclass
class Trend:
    """Relative change per interval of an EMA-smoothed series (negative = falling)."""

    beta: float = 0.7
    ema: float = NAN
    prev: float = NAN
    history: list[float] = field(default_factory=list)

    def update(self, value: float) -> float:
        if not math.isfinite(value):
            return self.trend
        self.prev = self.ema
        self.ema = value if not math.isfinite(self.ema) else self.beta * self.ema + (1 - self.beta) * value
        return self.trend

    @property
    def trend(self) -> float:
        if not (math.isfinite(self.prev) and math.isfinite(self.ema)) or self.prev == 0:
            return NAN
        return (self.ema - self.prev) / abs(self.prev)

    def state_dict(self) -> dict[str, Any]:
        return {"beta": float(self.beta), "ema": float(self.ema), "prev": float(self.prev)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.beta, self.ema, self.prev = float(d["beta"]), float(d["ema"]), float(d["prev"])


def statistical_efficiency(global_batch: float, base_batch: float, noise_scale: float) -> float:
    """E(B) relative to B0 (``perfmodel.efficiency``, the one definition)."""
    return efficiency(global_batch, base_batch, noise_scale)
