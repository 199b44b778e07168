"""One typed configuration, validated once before any rank trains.

Sources, later wins: defaults < TOML file (``config_file=`` or ``DYNAMIX_CONFIG``) <
keyword arguments < ``DYNAMIX_<FIELD>`` environment variables (so an operator can override a
job from the launcher without editing the script). Every invalid value raises ConfigError
naming the field, the value and what is allowed.
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from dynamix_hvd.lr import RULES as LR_RULES

CONTROLLERS = ("static", "oracle", "proportional", "goodput", "adaptdl", "random", "ppo")
CHECKPOINT_ON_ERROR = ("stop", "continue")


class ConfigError(ValueError):
    """An invalid configuration value; the message names field, value and what is allowed."""


@dataclass(frozen=True)
class DynamixConfig:
    base_batch: int = 32                 # initial per-rank batch size
    controller: str = "static"           # one of CONTROLLERS
    interval_steps: int = 10             # optimizer steps between decisions (sweep: docs/bench.md)
    min_decision_s: float = 0.5          # ... and at least this many seconds of steps apart (short steps:
                                         # more steps per interval; 0: exactly interval_steps)
    warmup_steps: int = 0                # no decision before this step
    decision_lag: int = 2                # steps every rank trains while a decision is in flight (inflight.py):
                                         # its plan applies that many steps later; 1: the controller in rank 0's
                                         # thread, 2: and the rows travel during a step, >= 3: and the plan too.
                                         # 0: every rank waits at the decision for the controller
    first_decision_steps: int = 5        # the first decision of a job (and after a restore or resize) comes
                                         # after this many steps (at most interval_steps): on a cluster that is
                                         # uneven from the start, every step before it runs at static's speed
    min_batch: int = 1                   # per-rank lower bound
    bn_min_batch: int = 16               # per-rank lower bound when the model has (non-sync) BatchNorm
                                         # layers (capped at base_batch)
    max_batch: int | tuple[int, ...] = 1024  # per-rank upper bound (one value or one per rank)
    quantum: int = 1                     # batch sizes are multiples of this where possible
    deadband: float = 0.05               # ignore proposals moving no rank by more than this fraction
    max_global_batch: int | None = None  # cap on B = sum of b_i
    min_global_batch: int | None = None  # floor on B (None: the initial global batch B0, as AdaptDL/Pollux)
    lr_rule: str = "none"                # none | linear | sqrt | adascale
    base_global_batch: int | None = None  # B0 of the LR rule (default: base_batch * world size)
    accumulation: int = 1                # gradient accumulation micro-batches per step
    seed: int = 0                        # sampler permutation seed (same on all ranks)
    shuffle: bool = True
    gns: bool | None = None              # gradient statistics for the noise scale; None (auto): on when the
                                         # controller or the LR rule reads it (goodput, ppo, adascale), off
                                         # for static and proportional, which pay nothing for it (issue 25)
    gns_beta: float = 0.9                # EMA factor of the noise-scale estimator
    gns_every: int = 2                   # gradient statistics on every k-th step (+ the step before each decision)
    gns_samples: int = 0                 # ... only the last ``gns_samples`` such steps before each decision (0: all;
                                         # fewer samples bias the estimate upwards on long intervals, see README)
    collector: bool = True               # sample NIC/CPU/memory with the native collector
    collector_period_ms: int = 100
    run_dir: str | None = None           # events.jsonl (+ TensorBoard) written here by rank 0
    checkpoint_every: int = 0            # steps between automatic checkpoints (0 = off)
    checkpoint_on_error: str = "stop"    # a checkpoint write fails (full disk, quota, I/O): "stop" raises
                                         # CheckpointWriteError on every rank, "continue" warns on rank 0 and
                                         # trains on (the next checkpoint retries); the previous file stays intact
    fallback_controller: str = "proportional"  # used when the controller fails or the guard fires
    guard_drop: float = 0.10             # goodput drop that counts as bad after a learned decision
    guard_patience: int = 2              # bad intervals in a row before falling back
    guard_retries: int = 1               # the guard's reverts that leave a controller without an anchor of its
                                         # own (goodput) in charge before the job goes to fallback_controller
    tensorboard: bool = True             # TensorBoard scalars in run_dir/tb (rank 0)
    oom_redo: bool = True                # on out-of-memory: lower that rank's cap, redo the step
    react: bool = True                   # decide early when a rank's step or compute time jumps (react.py)
    react_tol: float = 0.5               # relative change of 3 steps in a row that counts as a jump
    progress: bool = False               # tqdm bar on rank 0: epoch samples, ETA, plan, throughput
    controller_kwargs: Mapping[str, Any] = field(default_factory=dict)
    max_batch_growth: float | None = None  # B <= this x B0 (None: from lr_rule, lr.MAX_GROWTH; none -> 1)
    max_rank_change: float = 1.0         # per decision a rank's size stays in [b/(1+x), b(1+x)] (a rank
                                         # whose own detector saw its speed change is exempt)
    max_global_change: float = 0.5      # per decision B stays in [B/(1+x), B(1+x)]
    finetune: bool = False               # PPO only: fine-tune the policy online on rank 0 (background updates)
    finetune_steps: int = 32             # decisions (transitions) per PPO update
    finetune_lr: float = 1e-4            # Adam learning rate of the online updates
    finetune_epochs: int = 4             # PPO epochs over each rollout
    stall_timeout_s: float = 60.0        # a rank that completes no step for this long while a peer sends no
                                         # heartbeat for as long ends the job naming that peer (watchdog.py); 0 = off
    stop_on_signal: bool = True          # SIGTERM (torchrun, schedulers) or SIGUSR1 (mpirun forwards it) on any
                                         # rank: every rank checkpoints to run_dir after the same step and raises
                                         # StopTraining (exit code 75); a handler of the user's own is kept

    # ------------------------------------------------------------------------------------
    def validate(self, world_size: int | None = None) -> "DynamixConfig":
        def need(cond: bool, name: str, allowed: str) -> None:
            if not cond:
                raise ConfigError(f"{name}={getattr(self, name)!r} is invalid: {allowed}")

        def is_int(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        need(is_int(self.base_batch) and self.base_batch >= 1, "base_batch", "an integer >= 1")
        need(self.controller in CONTROLLERS, "controller", f"one of {CONTROLLERS}")
        need(is_int(self.interval_steps) and self.interval_steps >= 1, "interval_steps", "an integer >= 1")
        need(isinstance(self.min_decision_s, (int, float)) and not isinstance(self.min_decision_s, bool)
             and 0 <= self.min_decision_s <= 3600, "min_decision_s", "a number of seconds in [0, 3600]")
        need(is_int(self.warmup_steps) and self.warmup_steps >= 0, "warmup_steps", "an integer >= 0")
        need(is_int(self.decision_lag) and 0 <= self.decision_lag <= 64, "decision_lag",
             "an integer in [0, 64] (steps trained while rank 0 decides)")
        need(is_int(self.first_decision_steps) and self.first_decision_steps >= 2, "first_decision_steps",
             "an integer >= 2 (the first step is a warm-up and is not measured)")
        need(is_int(self.min_batch) and self.min_batch >= 1, "min_batch", "an integer >= 1")
        need(is_int(self.bn_min_batch) and self.bn_min_batch >= 1, "bn_min_batch", "an integer >= 1")
        caps = self.max_batch if isinstance(self.max_batch, tuple) else (self.max_batch,)
        need(all(is_int(c) and c >= self.min_batch for c in caps) and len(caps) >= 1, "max_batch",
             f"an integer >= min_batch={self.min_batch}, or one such integer per rank")
        if world_size is not None and isinstance(self.max_batch, tuple):
            need(len(self.max_batch) == world_size, "max_batch", f"{world_size} values, one per rank")
        need(self.base_batch <= max(caps), "base_batch", f"an integer <= max_batch={max(caps)}")
        need(is_int(self.quantum) and self.quantum >= 1, "quantum", "an integer >= 1")
        need(isinstance(self.deadband, (int, float)) and 0 <= self.deadband < 1, "deadband", "a number in [0, 1)")
        need(self.max_global_batch is None or (is_int(self.max_global_batch) and self.max_global_batch >= 1),
             "max_global_batch", "None or an integer >= 1")
        need(self.min_global_batch is None or (is_int(self.min_global_batch) and self.min_global_batch >= 1),
             "min_global_batch", "None or an integer >= 1")
        if self.min_global_batch is not None and self.max_global_batch is not None:
            need(self.min_global_batch <= self.max_global_batch, "min_global_batch",
                 f"an integer <= max_global_batch={self.max_global_batch}")
        need(self.lr_rule in LR_RULES, "lr_rule", f"one of {LR_RULES}")
        need(self.base_global_batch is None or (is_int(self.base_global_batch) and self.base_global_batch >= 1),
             "base_global_batch", "None or an integer >= 1")
        need(is_int(self.accumulation) and self.accumulation >= 1, "accumulation", "an integer >= 1")
        need(is_int(self.seed) and self.seed >= 0, "seed", "an integer >= 0")
        need(isinstance(self.shuffle, bool), "shuffle", "true or false")
        need(self.gns is None or isinstance(self.gns, bool), "gns", "true, false or None (auto)")
        need(isinstance(self.gns_beta, (int, float)) and 0 <= self.gns_beta < 1, "gns_beta", "a number in [0, 1)")
        need(is_int(self.gns_every) and self.gns_every >= 1, "gns_every", "an integer >= 1 (steps)")
        need(is_int(self.gns_samples) and self.gns_samples >= 0, "gns_samples",
             "an integer >= 0 (sampled steps per decision; 0 = every gns_every-th step)")
        need(isinstance(self.collector, bool), "collector", "true or false")
        need(is_int(self.collector_period_ms) and self.collector_period_ms >= 1, "collector_period_ms",
             "an integer >= 1 (milliseconds)")
        need(self.run_dir is None or isinstance(self.run_dir, str), "run_dir", "None or a directory path")
        need(is_int(self.checkpoint_every) and self.checkpoint_every >= 0, "checkpoint_every", "an integer >= 0")
        need(self.checkpoint_on_error in CHECKPOINT_ON_ERROR, "checkpoint_on_error", f"one of {CHECKPOINT_ON_ERROR}")
        need(self.fallback_controller in CONTROLLERS, "fallback_controller", f"one of {CONTROLLERS}")
        need(isinstance(self.guard_drop, (int, float)) and 0 < self.guard_drop < 1, "guard_drop", "a number in (0, 1)")
        need(is_int(self.guard_patience) and self.guard_patience >= 1, "guard_patience", "an integer >= 1")
        need(is_int(self.guard_retries) and self.guard_retries >= 0, "guard_retries", "an integer >= 0")
        need(isinstance(self.tensorboard, bool), "tensorboard", "true or false")
        need(isinstance(self.progress, bool), "progress", "true or false")
        need(isinstance(self.oom_redo, bool), "oom_redo", "true or false")
        need(isinstance(self.react, bool), "react", "true or false")
        need(isinstance(self.stop_on_signal, bool), "stop_on_signal", "true or false")
        need(isinstance(self.react_tol, (int, float)) and not isinstance(self.react_tol, bool)
             and 0 < self.react_tol <= 10, "react_tol", "a number in (0, 10]")
        need(self.max_batch_growth is None or (isinstance(self.max_batch_growth, (int, float))
                                               and not isinstance(self.max_batch_growth, bool)
                                               and self.max_batch_growth >= 1), "max_batch_growth",
             "None (from lr_rule) or a number >= 1")
        for name in ("max_rank_change", "max_global_change"):
            v = getattr(self, name)
            need(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 100, name,
                 "a number in (0, 100] (relative change per decision)")
        need(isinstance(self.controller_kwargs, Mapping), "controller_kwargs", "a table / dict")
        need(isinstance(self.finetune, bool), "finetune", "true or false")
        need(not self.finetune or self.controller == "ppo", "finetune",
             f"true only with controller='ppo' (controller={self.controller!r})")
        need(is_int(self.finetune_steps) and 2 <= self.finetune_steps <= 100_000, "finetune_steps",
             "an integer in [2, 100000] (decisions per PPO update)")
        need(isinstance(self.finetune_lr, (int, float)) and not isinstance(self.finetune_lr, bool)
             and 0 < self.finetune_lr <= 1, "finetune_lr", "a number in (0, 1]")
        need(is_int(self.finetune_epochs) and 1 <= self.finetune_epochs <= 100, "finetune_epochs",
             "an integer in [1, 100]")
        need(isinstance(self.stall_timeout_s, (int, float)) and not isinstance(self.stall_timeout_s, bool)
             and (self.stall_timeout_s == 0 or 1 <= self.stall_timeout_s <= 86400), "stall_timeout_s",
             "0 (off) or a number of seconds in [1, 86400]")
        return self

    def controller_options(self) -> dict[str, Any]:
        """Keyword arguments for ``make_controller(self.controller, ...)``: ``controller_kwargs``
        plus the online fine-tuning settings when ``finetune`` is on."""
        kw = dict(self.controller_kwargs)
        if self.finetune:
            kw.update(finetune=True, finetune_steps=self.finetune_steps, finetune_lr=float(self.finetune_lr),
                      finetune_epochs=self.finetune_epochs, finetune_seed=self.seed)
        return kw

    def min_global_batch_for(self, world_size: int) -> int:
        """The floor on the global batch: ``min_global_batch``, or the initial global batch
        base_batch x N, for every controller.

        The user tuned the LR for B0, and the LR rules (linear, sqrt, AdaScale) are defined for
        scaling up from it; Pollux/AdaptDL search B only from the initial batch upwards for the
        same reason. Below it the efficiency model E(B) (fed by a noisy noise-scale estimate) was
        the only argument, and it was wrong live: goodput and PPO cut B 128 -> 64-81 on
        link_degrade, hetero4x and transient_slowdown_link on a predicted +7-9% and then trailed
        proportional (1.22x to 90% on link_degrade, session 13). Set ``min_global_batch`` lower
        to allow it."""
        if self.min_global_batch is not None:
            return self.min_global_batch
        return max(1, self.base_batch * world_size)

    def max_global_batch_for(self, world_size: int) -> int | None:
        """The cap on the global batch: ``max_global_batch`` and the growth the LR rule allows
        (``max_batch_growth``, default ``lr.MAX_GROWTH[lr_rule]``) over B0; None: no cap."""
        from dynamix_hvd.lr import MAX_GROWTH

        growth = self.max_batch_growth if self.max_batch_growth is not None else MAX_GROWTH[self.lr_rule]
        b0 = self.base_global_batch or self.base_batch * world_size
        caps = [c for c in (self.max_global_batch, None if growth is None else int(growth * b0)) if c is not None]
        return min(caps) if caps else None

    @property
    def step_flags(self) -> bool:
        """Can any rank raise a per-step flag (out of memory, a change, a stop signal)? Else the
        engines send none (wire.py's flag vector), and the ranks' check that they left out the
        same updates and began their epochs together goes with it."""
        return self.oom_redo or self.react or self.stop_on_signal

    def first_due(self, start_step: int = 0) -> int:
        """The step count after which the first decision from ``start_step`` is due (a job's start,
        a restore, a resize): ``first_decision_steps`` (at most ``interval_steps``) later, not
        before ``warmup_steps``."""
        return max(start_step + min(self.first_decision_steps, self.interval_steps), self.warmup_steps)

    def next_interval(self, step_s: float) -> int:
        """Steps until the next regular decision: ``interval_steps``, or more when steps are so short
        that the interval would last less than ``min_decision_s`` (at most 64 x interval_steps)."""
        k = self.interval_steps
        if not (self.min_decision_s > 0 and step_s > 0 and step_s == step_s):
            return k
        return int(min(max(k, -(-self.min_decision_s // step_s)), 64 * k))

    def max_batch_for(self, world_size: int) -> tuple[int, ...]:
        if isinstance(self.max_batch, tuple):
            return self.max_batch
        return (self.max_batch,) * world_size

    # ------------------------------------------------------------------------------------
    @staticmethod
    def load(config_file: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
             **kwargs: Any) -> "DynamixConfig":
        """defaults < TOML file < kwargs < DYNAMIX_* environment; validated."""
        env = os.environ if env is None else env
        names = {f.name for f in fields(DynamixConfig)}
        values: dict[str, Any] = {}
        path = config_file or env.get("DYNAMIX_CONFIG")
        if path:
            values.update(_from_toml(Path(path), names))
        for k, v in kwargs.items():
            if k not in names:
                raise ConfigError(f"unknown configuration field {k!r}; known fields: {sorted(names)}")
            values[k] = v
        values.update(_from_env(env, names))
        if isinstance(values.get("max_batch"), list):
            values["max_batch"] = tuple(values["max_batch"])
        return DynamixConfig(**values).validate()

    def resolved(self, controller: Any = None) -> "DynamixConfig":
        """Automatic settings made concrete: ``gns`` None is on when the controller (``controller``,
        an object, else the ``controller`` name) or the LR rule (adascale) reads the noise scale.
        The engines resolve on rank 0 and broadcast (``core.resolve_config``): a controller object
        may exist on rank 0 only."""
        if self.gns is not None:
            return self
        from dynamix_hvd.controllers import uses_noise_scale
        on = self.lr_rule == "adascale" or uses_noise_scale(controller if controller is not None else self.controller)
        return dataclasses.replace(self, gns=on)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["controller_kwargs"] = dict(self.controller_kwargs)
        return d


def _from_toml(path: Path, names: set[str]) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from exc
    data = data.get("dynamix", data)
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"config file {str(path)!r}: unknown field(s) {unknown}; known fields: {sorted(names)}")
    return dict(data)


AUTO_BOOLS = ("gns",)   # true / false / None (auto: decided from the controller, DynamixConfig.resolved)


def _parse_env_value(name: str, raw: str, default: Any) -> Any:
    raw = raw.strip()
    try:
        if name == "max_batch":
            parts = [int(p) for p in raw.split(",")]
            return parts[0] if len(parts) == 1 else tuple(parts)
        if name in AUTO_BOOLS and raw.lower() in ("auto", "none", ""):
            return None
        if isinstance(default, bool) or name in AUTO_BOOLS:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true/false")
        if name in ("max_global_batch", "min_global_batch", "base_global_batch", "run_dir", "max_batch_growth") and \
                raw.lower() in ("", "none"):
            return None
        if isinstance(default, int) or name in ("max_global_batch", "min_global_batch", "base_global_batch"):
            return int(raw)
        if name == "max_batch_growth":
            return float(raw)
        if isinstance(default, float):
            return float(raw)
        if name == "controller_kwargs":
            return dict(tomllib.loads(raw))
        return raw
    except ValueError as exc:
        raise ConfigError(f"environment variable DYNAMIX_{name.upper()}={raw!r} is invalid: {exc}") from exc


# Every DYNAMIX_* environment variable the project reads, in one registry: the configuration
# fields (DYNAMIX_<FIELD>, added below) and these. A DYNAMIX_* name that is in neither is
# rejected (a misspelt override would otherwise be ignored without a word).
ENV_VARS: dict[str, str] = {
    "DYNAMIX_CONFIG": "TOML configuration file",
    "DYNAMIX_CACHE": "cache directory of generated data sets (workloads.py)",
    "DYNAMIX_IFACES": "network interfaces the collector watches (metrics/interfaces.py)",
    "DYNAMIX_PMPI_LIB": "path of libdynamix_pmpi.so (launch.py)",
    "DYNAMIX_PMPI": "0/1: collective recording on/off in the preloaded PMPI library (csrc/pmpi/recorder.cc)",
    "DYNAMIX_PMPI_RING": "ring capacity of the PMPI recorder (csrc/pmpi/recorder.cc)",
    "DYNAMIX_WITH_NCCL": "build: compile the NCCL hooks (setup.py / CMake)",
    "DYNAMIX_REQUIRE_PMPI": "tests: fail instead of skip without the PMPI recorder",
    "DYNAMIX_VENV": "scripts: the virtual environment to use",
}
ENV_PATTERNS: tuple[str, ...] = (r"DYNAMIX_LINK_R\d+",)   # emulate/worker.py: one rank's emulated link


def env_var_names() -> list[str]:
    return sorted(set(ENV_VARS) | {f"DYNAMIX_{f.name.upper()}" for f in fields(DynamixConfig)})


def check_env(env: Mapping[str, str]) -> None:
    """Raise ConfigError for a DYNAMIX_* variable nobody reads, naming the closest valid one."""
    import difflib
    import re

    known = env_var_names()
    for key in env:
        if not key.startswith("DYNAMIX_") or key in known or any(re.fullmatch(p, key) for p in ENV_PATTERNS):
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.0)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ConfigError(f"environment variable {key} is not a dynamix setting{hint} "
                          f"(valid: {', '.join(known)})")


def _from_env(env: Mapping[str, str], names: set[str]) -> dict[str, Any]:
    check_env(env)
    defaults = {f.name: (f.default if f.default is not dataclasses.MISSING else {}) for f in fields(DynamixConfig)}
    out = {}
    for key, raw in env.items():
        if not key.startswith("DYNAMIX_") or key == "DYNAMIX_CONFIG":
            continue
        name = key[len("DYNAMIX_"):].lower()
        if name in names:
            out[name] = _parse_env_value(name, raw, defaults[name])
    return out


# ---- the same configuration on every rank ------------------------------------------------------
# Settings only rank 0 reads (its controller, guard, fine-tuning, run log and progress bar) or that
# are a rank's own business (its collector): they may differ between ranks. Every other field, and
# the data set's size, must be equal on every rank: ranks that disagree on, say, decision_lag or
# stall_timeout_s wait in different collectives for ever, and ranks that disagree on seed,
# base_batch or the data set's size train some samples twice and others never, without a word.
RANK0_ONLY = frozenset({"controller", "controller_kwargs", "fallback_controller", "guard_drop", "guard_patience",
                        "guard_retries", "finetune", "finetune_steps", "finetune_lr", "finetune_epochs",
                        "tensorboard", "progress", "collector", "collector_period_ms"})


def agreement_fields() -> tuple[str, ...]:
    """The fields every rank must agree on (``rank_fingerprint``'s order), then the data set's size."""
    return tuple(f.name for f in fields(DynamixConfig) if f.name not in RANK0_ONLY) + ("dataset_size",)


def _hash48(value: Any) -> float:
    import hashlib

    return float(int.from_bytes(hashlib.blake2b(repr(value).encode(), digest_size=6).digest(), "big"))


def schema_fingerprint() -> list[float]:
    """What ``rank_fingerprint`` compares, in two floats (this length in every version): how many
    fields and a 48-bit hash of their names. Ranks running different dynamix_hvd versions differ
    here, and their fingerprints, of other lengths, could not be gathered side by side."""
    return [float(len(agreement_fields())), _hash48(agreement_fields())]


def schema_disagreement(table: Any, rank: int) -> str | None:
    """The error message when the ranks' ``schema_fingerprint`` rows differ, else None."""
    odd = [r for r in range(1, len(table)) if list(table[r]) != list(table[0])]
    if not odd:
        return None
    ranks = ", ".join(map(str, odd[:8])) + (", ..." if len(odd) > 8 else "")
    return (f"dynamix_hvd differs across ranks: rank(s) {ranks} check another set of settings than rank 0 "
            f"({int(table[0][0])} settings; rank {rank}, this one, checks {int(table[rank][0])}), so they run "
            f"another version of dynamix_hvd; install the same version on every node")


def rank_fingerprint(config: DynamixConfig, dataset_size: int) -> list[float]:
    """One 48-bit hash per ``agreement_fields()`` entry, as floats (exact in float64), for one
    allgather. ``run_dir`` counts only as set or unset, and only with automatic checkpoints (their
    save waits for every rank): only rank 0 writes the run log, so user code may set it there alone."""
    values = {**{f: getattr(config, f) for f in agreement_fields()[:-1]}, "dataset_size": int(dataset_size)}
    values["run_dir"] = values["run_dir"] is not None if config.checkpoint_every > 0 else None
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    return [_hash48(values[f]) for f in agreement_fields()]


def disagreement(table: Any, rank: int, mine: Mapping[str, Any]) -> str | None:
    """The error message when the ranks' fingerprints (``table``: one ``rank_fingerprint`` row per
    rank) differ, else None. Every rank gets the same fields and ranks named; ``mine`` (this
    rank's values) adds what this rank has."""
    names = agreement_fields()
    diffs = [(r, [names[j] for j in range(len(names)) if table[r][j] != table[0][j]]) for r in range(1, len(table))]
    diffs = [(r, f) for r, f in diffs if f]
    if not diffs:
        return None
    fields_named = sorted({n for _, f in diffs for n in f})
    per_rank = "; ".join(f"rank {r}'s {', '.join(f)}" for r, f in diffs[:8]) + ("; ..." if len(diffs) > 8 else "")
    have = ", ".join(f"{n}={mine[n]!r}" for n in fields_named if n in mine)
    return (f"the configuration differs across ranks (compared with rank 0's): {per_rank}. Every rank must have the same "
            f"{', '.join(fields_named)} (rank {rank}, this one, has {have}); set them the same way on every node "
            f"(DYNAMIX_* environment, config file, keyword arguments, dataset_size)")
