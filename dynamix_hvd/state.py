"""Observation building and normalisation, shared by the live hook and the simulator.

One row per worker = that worker's local features + the job's global features, so a
policy whose parameters are shared across rows serves any number of workers.

Conventions
-----------
* Every feature is a dimensionless number roughly in [-1, 1] (ratios, log-ratios scaled
  and clipped), so the same policy transfers between fast/slow and small/large jobs.
* A metric that was not measured is NaN in the records; its feature becomes 0 and the
  row's ``*_missing`` indicator for its group becomes 1 ("no data" is not zero).
* Feature groups (``network``, ``statistical``, ...) can be switched off with a
  ``disabled_groups`` set: their columns are kept (the shape never changes) but zeroed.
  This is how the ablations are trained and evaluated.

The arrays path (``observation_from_arrays``) is what the simulator's hot loop uses; the
records path (``build_observation``) converts a ``ClusterState`` to the same arrays first,
so both give identical observations (tested).
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from dynamix_hvd.records import ClusterState

# Raw per-worker measurements used by the observation, in this column order.
RAW_WORKER_FIELDS: tuple[str, ...] = (
    "batch_size", "max_batch", "compute_s", "step_s", "comm_s", "allreduce_p50_s",
    "nic_tx_Bps", "nic_rx_Bps", "link_capacity_Bps", "cpu_util", "gpu_util", "mem_headroom",
)
_C = {name: i for i, name in enumerate(RAW_WORKER_FIELDS)}
_RAW_GETTER = operator.attrgetter(*RAW_WORKER_FIELDS)

# (feature name, group). Local features first, then global ones (same value on every row).
LOCAL_FEATURES: tuple[tuple[str, str], ...] = (
    ("log_time_per_sample_rel", "system"),   # log2(t_i / median t), t = compute_s / b_i
    ("log_speed_over_share", "system"),      # log2(speed share / batch share): >0 = give it more
    ("log_batch_rel", "system"),             # log2(b_i / mean b)
    ("batch_share_x_n", "system"),           # N * b_i / B  (1 = uniform)
    ("mem_use", "system"),                   # b_i / max_batch_i
    ("cpu_util", "system"),
    ("gpu_util", "system"),
    ("mem_headroom", "system"),
    ("compute_share_of_step", "network"),    # compute_s / step_s (the rest is communication)
    ("wait_frac", "network"),                # time waiting for others at the allreduce / step
    ("comm_frac", "network"),                # allreduce latency / step
    ("nic_util", "network"),                 # (tx + rx) / 2 / link capacity
    ("log_link_rel", "network"),             # log2(capacity_i / median capacity)
    ("log_allreduce_s", "network"),          # log10(allreduce seconds), scaled
    ("last_action", "action"),               # this worker's last adjustment / max level
    ("sys_missing", "missing"),
    ("net_missing", "missing"),
)
GLOBAL_FEATURES: tuple[tuple[str, str], ...] = (
    ("log_batch_over_noise", "statistical"),  # log2(B / noise scale) / 4
    ("loss_trend", "statistical"),
    ("grad_var_trend", "statistical"),
    ("val_loss_trend", "statistical"),
    ("stat_missing", "missing"),
    ("progress", "global"),
    ("log_world_size", "global"),             # log2(N) / 10
    ("log_batch_over_ref", "global"),         # log2(B / B_ref) / 2
    ("mean_comm_frac", "network"),            # mean allreduce latency / step
    ("imbalance", "system"),                  # max compute / mean compute - 1
    ("last_global_action", "action"),
)
FEATURE_NAMES: tuple[str, ...] = tuple(n for n, _ in LOCAL_FEATURES + GLOBAL_FEATURES)
FEATURE_GROUPS: dict[str, str] = dict(LOCAL_FEATURES + GLOBAL_FEATURES)
N_LOCAL = len(LOCAL_FEATURES)
N_FEATURES = len(FEATURE_NAMES)
GROUPS: tuple[str, ...] = tuple(sorted(set(FEATURE_GROUPS.values())))


class ObservationError(ValueError):
    """The records cannot be turned into an observation (the message says why)."""


@dataclass(frozen=True)
class ObsConfig:
    """How observations are built. Stored inside a trained policy so it is rebuilt the same way."""

    disabled_groups: frozenset[str] = field(default_factory=frozenset)
    n_action_levels: int = 5      # per-worker actions -k..+k, k = n_action_levels // 2
    # single features kept although their group is disabled (e.g. the job's mean_comm_frac without the
    # per-worker network columns; docs/policy.md, session 55)
    enabled_features: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        object.__setattr__(self, "disabled_groups", frozenset(self.disabled_groups))
        object.__setattr__(self, "enabled_features", frozenset(self.enabled_features))
        unknown = set(self.disabled_groups) - set(GROUPS)
        if unknown:
            raise ObservationError(f"disabled_groups has unknown groups {sorted(unknown)}; known: {list(GROUPS)}")
        unknown = set(self.enabled_features) - set(FEATURE_NAMES)
        if unknown:
            raise ObservationError(f"enabled_features has unknown features {sorted(unknown)}; known: {list(FEATURE_NAMES)}")
        idle = sorted(n for n in self.enabled_features if FEATURE_GROUPS[n] not in self.disabled_groups)
        if idle:
            raise ObservationError(f"enabled_features {idle}: their groups are not disabled, so enabling them does "
                                   f"nothing (disabled groups: {sorted(self.disabled_groups)})")

    def column_mask(self) -> np.ndarray:
        """1.0 for enabled feature columns, 0.0 for disabled ones."""
        return np.array([0.0 if FEATURE_GROUPS[n] in self.disabled_groups and n not in self.enabled_features else 1.0
                         for n in FEATURE_NAMES])

    def with_levels(self, n_action_levels: int) -> "ObsConfig":
        """The same columns with ``n_action_levels`` levels."""
        return ObsConfig(self.disabled_groups, n_action_levels, self.enabled_features)

    def to_dict(self) -> dict:
        d: dict = {"disabled_groups": sorted(self.disabled_groups), "n_action_levels": self.n_action_levels}
        if self.enabled_features:
            d["enabled_features"] = sorted(self.enabled_features)
        return d

    @staticmethod
    def from_lists(disable: str, enable: str = "") -> "ObsConfig":
        """From the command line's comma lists (``--disable`` groups, ``--enable`` single features)."""
        return ObsConfig(frozenset(g for g in disable.split(",") if g),
                         enabled_features=frozenset(f for f in enable.split(",") if f))

    @staticmethod
    def from_dict(d: Mapping) -> "ObsConfig":
        return ObsConfig(frozenset(d.get("disabled_groups", ())), int(d.get("n_action_levels", 5)),
                         frozenset(d.get("enabled_features", ())))


def raw_worker_matrix(state: ClusterState) -> np.ndarray:
    """(N, len(RAW_WORKER_FIELDS)) float array of the per-worker records, NaN where absent."""
    # one C-level attribute fetch per record (the loop over fields in Python was ~6 ms of a
    # decision at 1024 ranks)
    rows = list(map(_RAW_GETTER, state.workers))
    if not rows:
        return np.empty((0, len(RAW_WORKER_FIELDS)))
    return np.array(rows, dtype=float)


def _log2_rel(x: np.ndarray, ref: float, scale: float = 3.0) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.log2(x / ref) / scale
    return np.clip(v, -1.5, 1.5)


def _finite_or(x: float, default: float = 0.0) -> float:
    return float(x) if math.isfinite(x) else default


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def observation_from_arrays(
    raw: np.ndarray,
    *,
    noise_scale: float,
    loss_trend: float,
    grad_var_trend: float,
    val_loss_trend: float,
    progress: float,
    ref_global_batch: float,
    last_action: np.ndarray | None = None,
    last_global_action: float = 0.0,
    config: ObsConfig = ObsConfig(),
) -> np.ndarray:
    """The (N, N_FEATURES) float32 observation from raw per-worker measurements.

    ``last_action`` holds each worker's last adjustment in levels (-k..k)."""
    raw = np.asarray(raw, dtype=np.float64)
    if raw.ndim != 2 or raw.shape[1] != len(RAW_WORKER_FIELDS):
        raise ObservationError(
            f"raw worker matrix has shape {raw.shape}; expected (N, {len(RAW_WORKER_FIELDS)})")
    n = raw.shape[0]
    if n == 0:
        raise ObservationError("no workers in the state")
    b = raw[:, _C["batch_size"]]
    if not np.all(np.isfinite(b)) or np.any(b < 0) or b.sum() <= 0:
        raise ObservationError(f"batch sizes {b.tolist()} must be finite, >= 0 and sum > 0")
    B = b.sum()
    compute, step = raw[:, _C["compute_s"]], raw[:, _C["step_s"]]
    k = max(1, config.n_action_levels // 2)
    obs = np.zeros((n, N_FEATURES), dtype=np.float64)

    with np.errstate(divide="ignore", invalid="ignore"):
        tps = np.where(b > 0, compute / np.maximum(b, 1), np.nan)
        ok_tps = np.isfinite(tps) & (tps > 0)
        med_tps = float(np.median(tps[ok_tps])) if ok_tps.any() else np.nan
        speed = np.where(ok_tps, 1.0 / tps, np.nan)
        if ok_tps.any():
            speed = np.where(ok_tps, speed, np.nanmean(speed))
            speed_share = speed / speed.sum()
        else:
            speed_share = np.full(n, 1.0 / n)
        share = b / B
        obs[:, 0] = np.where(ok_tps, _log2_rel(tps, med_tps), 0.0)
        obs[:, 1] = np.where(ok_tps, np.clip(np.log2(speed_share / np.maximum(share, 0.5 / B)) / 2.0, -1.5, 1.5), 0.0)
        obs[:, 2] = _log2_rel(np.maximum(b, 0.5), b.mean())
        obs[:, 3] = np.clip(share * n, 0, 8) / 2.0
        cap = raw[:, _C["max_batch"]]
        obs[:, 4] = np.where(cap > 0, b / cap, 0.0)
        obs[:, 5] = raw[:, _C["cpu_util"]]
        obs[:, 6] = raw[:, _C["gpu_util"]]
        obs[:, 7] = raw[:, _C["mem_headroom"]]
        obs[:, 8] = compute / step
        comm = raw[:, _C["comm_s"]]
        obs[:, 9] = (comm - np.nanmin(comm)) / step if np.isfinite(comm).any() else np.nan
        ar = raw[:, _C["allreduce_p50_s"]]
        obs[:, 10] = ar / step
        link = raw[:, _C["link_capacity_Bps"]]
        nic = (raw[:, _C["nic_tx_Bps"]] + raw[:, _C["nic_rx_Bps"]]) / 2.0
        obs[:, 11] = np.clip(nic / link, 0.0, 1.5)
        ok_link = np.isfinite(link) & (link > 0)
        obs[:, 12] = np.where(ok_link, _log2_rel(link, float(np.median(link[ok_link])) if ok_link.any() else 1.0), np.nan)
        obs[:, 13] = np.clip((np.log10(ar) + 2.0) / 2.0, -1.5, 1.5)
    if last_action is not None:
        la = np.asarray(last_action, dtype=np.float64).reshape(-1)
        if la.size == n:
            obs[:, 14] = la / k
    sys_cols = [5, 6, 7]
    net_cols = [8, 9, 10, 11, 12, 13]
    obs[:, 15] = np.any(~np.isfinite(obs[:, sys_cols]), axis=1)
    obs[:, 16] = np.any(~np.isfinite(obs[:, net_cols]), axis=1)

    # global features
    g = N_LOCAL
    stat_missing = 0.0
    if math.isfinite(noise_scale) and noise_scale > 0:
        obs[:, g + 0] = _clip(math.log2(B / noise_scale) / 4.0, -1.5, 1.5)
    else:
        stat_missing = 1.0
    obs[:, g + 1] = _clip(_finite_or(loss_trend) * 10.0, -1.5, 1.5)
    obs[:, g + 2] = _clip(_finite_or(grad_var_trend), -1.5, 1.5)
    obs[:, g + 3] = _clip(_finite_or(val_loss_trend) * 10.0, -1.5, 1.5)
    if not (math.isfinite(loss_trend) and math.isfinite(grad_var_trend)):
        stat_missing = 1.0
    obs[:, g + 4] = stat_missing
    obs[:, g + 5] = _clip(_finite_or(progress), 0.0, 1.0)
    obs[:, g + 6] = np.log2(n) / 10.0
    obs[:, g + 7] = _clip(math.log2(B / ref_global_batch) / 2.0, -1.5, 1.5) if ref_global_batch > 0 else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        mcf = np.nanmean(ar / step) if np.isfinite(ar / step).any() else 0.0
        mean_c = np.nanmean(compute) if np.isfinite(compute).any() else np.nan
        imb = np.nanmax(compute) / mean_c - 1.0 if np.isfinite(mean_c) and mean_c > 0 else 0.0
    obs[:, g + 8] = _clip(float(mcf), 0.0, 1.5)
    obs[:, g + 9] = _clip(float(imb), 0.0, 1.5)
    obs[:, g + 10] = last_global_action

    obs[~np.isfinite(obs)] = 0.0
    if config.disabled_groups:
        obs *= config.column_mask()[None, :]
    return obs.astype(np.float32)


def build_observation(
    state: ClusterState,
    *,
    ref_global_batch: float | None = None,
    last_global_action: float = 0.0,
    config: ObsConfig = ObsConfig(),
) -> np.ndarray:
    """The (N, N_FEATURES) observation of a ClusterState (live hook or simulator)."""
    glob = state.glob
    ref = float(ref_global_batch) if ref_global_batch else float(state.plan.global_batch)
    return observation_from_arrays(
        raw_worker_matrix(state),
        noise_scale=glob.noise_scale,
        loss_trend=glob.loss_trend,
        grad_var_trend=glob.grad_var_trend,
        val_loss_trend=glob.val_loss_trend,
        progress=glob.progress,
        ref_global_batch=ref,
        last_action=state.last_action,
        last_global_action=last_global_action,
        config=config,
    )


def feature_table(obs: np.ndarray, names: Iterable[str] = FEATURE_NAMES) -> str:
    """A readable dump of an observation (for logs and debugging)."""
    names = list(names)
    lines = ["rank " + " ".join(f"{n[:10]:>10}" for n in names)]
    for i, row in enumerate(obs):
        lines.append(f"{i:4d} " + " ".join(f"{v:10.3f}" for v in row))
    return "\n".join(lines)


def pad_rows(obs: np.ndarray, n_max: int) -> np.ndarray:
    """(n_max, 1 + F): column 0 is the valid-row mask, rows beyond N are zero."""
    n, f = obs.shape
    if n > n_max:
        raise ObservationError(f"{n} workers exceed the padded size n_max={n_max}")
    out = np.zeros((n_max, f + 1), dtype=np.float32)
    out[:n, 0] = 1.0
    out[:n, 1:] = obs
    return out


__all__: Sequence[str] = [
    "FEATURE_NAMES", "FEATURE_GROUPS", "N_FEATURES", "N_LOCAL", "GROUPS", "RAW_WORKER_FIELDS",
    "ObsConfig", "ObservationError", "build_observation", "observation_from_arrays",
    "raw_worker_matrix", "pad_rows", "feature_table",
]
