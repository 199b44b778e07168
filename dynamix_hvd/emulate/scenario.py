"""Scenario files: an emulated cluster (one ``[[workers]]`` table per rank), timed
``[[events]]`` and the training goal, in TOML.

Parsing is a pure function over text (``parse_scenario``); every unknown key or bad value
raises ``ScenarioError`` whose message names the key (``workers[2].per_sample_ms``).

    name = "hetero4x"
    workload = "mnist1d_mlp"
    target_accuracy = 0.6
    max_time_s = 90
    base_batch = 32
    seed = 1

    [[workers]]                 # rank 0
    fixed_ms = 2.0              # compute phase lasts >= fixed_ms + per_sample_ms * b
    per_sample_ms = 0.5
    max_batch = 512             # b > max_batch raises an emulated out-of-memory error
    bandwidth_mbit = 1000       # this rank's link, both directions
    latency_ms = 0.1            # one-way delay added by this rank's link

    speed_trace = "traces/job_3_norm.csv"   # optional: a PAI per-worker trace (path relative to
    speed_trace_worker = 7      # this file) and the id of the worker it replays; or "cov:FILE"
    speed_trace_steps_per_row = 10          # (the CoV table, drawn with speed_trace_seed); the
    speed_trace_offset = 0      # compute time x the trace's value at row offset + step // steps_per_row

    [[events]]
    at_s = 20                   # training-clock seconds (evaluation pauses the clock)
    rank = 1
    per_sample_ms = 2.0         # any numeric worker key with its new value (not the speed_trace keys)

Top level ``grad_mb`` (default 0): an extra gradient payload of that many megabytes (10^6 bytes)
allreduced every step with the model's own gradients (``emulate.payload``).

Top level ``lr_rule`` (default ``"none"``): the hook's learning-rate rule for a changing global batch
(``lr.RULES``). It also sets how far the global batch may grow (``lr.MAX_GROWTH``: not at all under
``none``), so only a scenario with ``sqrt``, ``linear`` or ``adascale`` lets a controller grow it.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from dynamix_hvd.lr import RULES as LR_RULES

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"

WORKLOADS = ("mnist1d_mlp", "mnist1d_cnn", "mnist1d_resnet", "digits_mlp")


class ScenarioError(ValueError):
    """A scenario file is invalid; the message names the offending key."""


@dataclass(frozen=True)
class WorkerSpec:
    """One emulated rank: its compute speed, memory limit and link."""

    fixed_ms: float
    per_sample_ms: float
    max_batch: int = 1024
    bandwidth_mbit: float = 1000.0
    latency_ms: float = 0.0
    speed_trace: str = ""                 # absolute path, or "cov:" + absolute path; "" = none
    speed_trace_worker: int | None = None  # PAI file: the worker id replayed
    speed_trace_steps_per_row: int | None = None  # None: the file's sampling interval
    speed_trace_offset: int = 0           # first trace row
    speed_trace_seed: int | None = None   # cov: the draw's seed (None: the scenario's seed)

    def compute_s(self, batch_size: int) -> float:
        """The emulated duration of one forward+backward on ``batch_size`` samples."""
        return (self.fixed_ms + self.per_sample_ms * batch_size) / 1000.0

    @property
    def samples_per_s(self) -> float:
        """Marginal throughput (the oracle's weight): samples per second of compute."""
        return 1000.0 / self.per_sample_ms if self.per_sample_ms > 0 else math.inf


@dataclass(frozen=True)
class Event:
    """At training-clock time ``at_s``, rank ``rank``'s worker keys take new values."""

    at_s: float
    rank: int
    changes: Mapping[str, float]

    @property
    def touches_link(self) -> bool:
        return any(k in LINK_KEYS for k in self.changes)


@dataclass(frozen=True)
class Scenario:
    name: str
    workload: str
    target_accuracy: float
    max_time_s: float
    base_batch: int
    seed: int
    workers: tuple[WorkerSpec, ...]
    events: tuple[Event, ...] = ()
    description: str = ""
    interval_steps: int = 10     # steps between controller decisions
    eval_every_steps: int = 10   # steps between test-set evaluations (clock paused)
    lr: float = 0.01
    min_global_batch: int | None = None  # the hook's floor on B (None: its default, base_batch * N // 2)
    grad_mb: float = 0.0         # extra gradient payload allreduced every step, megabytes (10^6 bytes)
    lr_rule: str = "none"        # the hook's LR rule (lr.RULES); "none" also keeps B <= B0
    source: str = ""             # file it was read from, if any

    @property
    def world_size(self) -> int:
        return len(self.workers)

    def workers_at(self, t_s: float) -> tuple[WorkerSpec, ...]:
        """Every rank's parameters after applying the events with ``at_s <= t_s``."""
        ws = list(self.workers)
        for ev in sorted(self.events, key=lambda e: e.at_s):
            if ev.at_s <= t_s:
                ws[ev.rank] = replace(ws[ev.rank], **ev.changes)
        return tuple(ws)

    def true_speeds(self, t_s: float, batch_sizes: tuple[int, ...] | None = None) -> list[float]:
        """Per-rank true samples/s at time ``t_s`` (the oracle's knowledge). With
        ``batch_sizes`` it includes the fixed cost, else it is the marginal speed. Speed traces are not
        included (they follow the step count: ``EmulatedDevice.true_speeds`` has them)."""
        ws = self.workers_at(t_s)
        if batch_sizes is None:
            return [w.samples_per_s for w in ws]
        return [b / w.compute_s(b) if b > 0 else w.samples_per_s for w, b in zip(ws, batch_sizes)]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["events"] = [{"at_s": e.at_s, "rank": e.rank, **dict(e.changes)} for e in self.events]
        return d


# key -> (type, check, what the check means) --------------------------------------------
def _pos(x: float) -> bool:
    return x > 0


def _nonneg(x: float) -> bool:
    return x >= 0


def _frac(x: float) -> bool:
    return 0 < x <= 1


WORKER_KEYS: dict[str, tuple[type, Any, str]] = {
    "fixed_ms": (float, _nonneg, ">= 0"),
    "per_sample_ms": (float, _pos, "> 0"),
    "max_batch": (int, _pos, ">= 1"),
    "bandwidth_mbit": (float, _pos, "> 0"),
    "latency_ms": (float, _nonneg, ">= 0"),
}
TRACE_KEYS: dict[str, tuple[type, Any, str]] = {
    "speed_trace": (str, bool, "a non-empty path (PAI per-worker file) or cov:PATH (CoV table)"),
    "speed_trace_worker": (int, _nonneg, ">= 0"),
    "speed_trace_steps_per_row": (int, _pos, ">= 1"),
    "speed_trace_offset": (int, _nonneg, ">= 0"),
    "speed_trace_seed": (int, _nonneg, ">= 0"),
}
LINK_KEYS = ("bandwidth_mbit", "latency_ms")
REQUIRED_WORKER_KEYS = ("fixed_ms", "per_sample_ms")

TOP_KEYS: dict[str, tuple[type, Any, str]] = {
    "name": (str, bool, "a non-empty string"),
    "workload": (str, lambda s: s in WORKLOADS, f"one of {list(WORKLOADS)}"),
    "target_accuracy": (float, _frac, "in (0, 1]"),
    "max_time_s": (float, _pos, "> 0"),
    "base_batch": (int, _pos, ">= 1"),
    "seed": (int, _nonneg, ">= 0"),
    "description": (str, lambda s: True, "a string"),
    "interval_steps": (int, _pos, ">= 1"),
    "eval_every_steps": (int, _pos, ">= 1"),
    "lr": (float, _pos, "> 0"),
    "min_global_batch": (int, _pos, ">= 1"),
    "grad_mb": (float, _nonneg, ">= 0"),
    "lr_rule": (str, lambda s: s in LR_RULES, f"one of {list(LR_RULES)}"),
}
REQUIRED_TOP_KEYS = ("name", "workload", "target_accuracy", "max_time_s", "base_batch", "seed")
TABLE_KEYS = ("workers", "events")


def _value(key: str, raw: Any, spec: tuple[type, Any, str]) -> Any:
    typ, ok, what = spec
    if typ is float:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ScenarioError(f"{key} = {raw!r}: must be a number {what}")
        val: Any = float(raw)
        if not math.isfinite(val):
            raise ScenarioError(f"{key} = {raw!r}: must be finite")
    elif typ is int:
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise ScenarioError(f"{key} = {raw!r}: must be an integer {what}")
        val = raw
    else:
        if not isinstance(raw, str):
            raise ScenarioError(f"{key} = {raw!r}: must be {what}")
        val = raw
    if not ok(val):
        raise ScenarioError(f"{key} = {raw!r}: must be {what}")
    return val


def _unknown(where: str, keys: Any, allowed: Any) -> None:
    extra = sorted(set(keys) - set(allowed))
    if extra:
        prefix = f"{where}." if where else ""
        raise ScenarioError(f"unknown key {prefix}{extra[0]}; allowed: {sorted(allowed)}")


def _trace_keys(where: str, w: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
    """Validate a worker's speed_trace keys (loading the file); returns the WorkerSpec fields."""
    from dynamix_hvd.emulate import speedtrace
    from dynamix_hvd.traces import TraceError

    got = {k: _value(f"{where}.{k}", w[k], TRACE_KEYS[k]) for k in TRACE_KEYS if k in w}
    if "speed_trace" not in got:
        if got:
            k = sorted(got)[0]
            raise ScenarioError(f"{where}.{k} = {got[k]!r}: needs {where}.speed_trace")
        return {}
    raw = got["speed_trace"]
    cov = raw.startswith("cov:")
    rel = raw[4:] if cov else raw
    path = Path(rel) if Path(rel).is_absolute() else (base_dir / rel)
    spec = ("cov:" if cov else "") + str(path.resolve())
    try:
        speedtrace.load_trace(spec)
    except (TraceError, OSError, ValueError) as exc:
        raise ScenarioError(f"{where}.speed_trace = {raw!r}: {exc}") from None
    if cov:
        if "speed_trace_worker" in got:
            raise ScenarioError(f"{where}.speed_trace_worker = {got['speed_trace_worker']}: only for a PAI "
                                f"per-worker file; with cov: each rank takes its own column of the draw")
    else:
        if "speed_trace_seed" in got:
            raise ScenarioError(f"{where}.speed_trace_seed = {got['speed_trace_seed']}: only for cov:FILE "
                                f"(a PAI file is replayed as measured)")
        if "speed_trace_worker" not in got:
            raise ScenarioError(f"missing key {where}.speed_trace_worker (the worker id to replay from "
                                f"{raw!r}; ids: {list(speedtrace.worker_ids(spec))})")
        ids = speedtrace.worker_ids(spec)
        if got["speed_trace_worker"] not in ids:
            raise ScenarioError(f"{where}.speed_trace_worker = {got['speed_trace_worker']}: no such worker in "
                                f"{raw!r}; ids: {list(ids)}")
    rows = speedtrace.n_rows(spec)
    if got.get("speed_trace_offset", 0) >= rows:
        raise ScenarioError(f"{where}.speed_trace_offset = {got['speed_trace_offset']}: must be < the "
                            f"trace's {rows} rows")
    got["speed_trace"] = spec
    return got


def scenario_from_dict(doc: Mapping[str, Any], source: str = "", base_dir: Path | None = None) -> Scenario:
    """Validate a parsed TOML document and build the Scenario. Relative ``speed_trace`` paths are
    taken from ``base_dir`` (default: the source file's directory, else the working directory)."""
    if base_dir is None:
        src = Path(source) if source else None
        base_dir = src.parent if src is not None and src.is_file() else Path.cwd()
    _unknown("", doc, (*TOP_KEYS, *TABLE_KEYS))
    for k in REQUIRED_TOP_KEYS:
        if k not in doc:
            raise ScenarioError(f"missing key {k}")
    top = {k: _value(k, doc[k], TOP_KEYS[k]) for k in TOP_KEYS if k in doc}

    raw_workers = doc.get("workers")
    if not isinstance(raw_workers, list) or not raw_workers:
        raise ScenarioError("workers: need at least one [[workers]] table (one per rank)")
    workers = []
    for r, w in enumerate(raw_workers):
        where = f"workers[{r}]"
        if not isinstance(w, dict):
            raise ScenarioError(f"{where}: must be a table")
        _unknown(where, w, (*WORKER_KEYS, *TRACE_KEYS))
        for k in REQUIRED_WORKER_KEYS:
            if k not in w:
                raise ScenarioError(f"missing key {where}.{k}")
        fields = {k: _value(f"{where}.{k}", v, WORKER_KEYS[k]) for k, v in w.items() if k in WORKER_KEYS}
        workers.append(WorkerSpec(**fields, **_trace_keys(where, w, base_dir)))
    if top["base_batch"] > min(w.max_batch for w in workers):
        raise ScenarioError(
            f"base_batch = {top['base_batch']}: must be <= every workers[i].max_batch "
            f"(smallest is {min(w.max_batch for w in workers)})")

    events = []
    raw_events = doc.get("events", [])
    if not isinstance(raw_events, list):
        raise ScenarioError("events: must be an array of [[events]] tables")
    for i, e in enumerate(raw_events):
        where = f"events[{i}]"
        if not isinstance(e, dict):
            raise ScenarioError(f"{where}: must be a table")
        bad = sorted(set(e) & set(TRACE_KEYS))
        if bad:
            raise ScenarioError(f"{where}.{bad[0]}: events change numeric worker keys only "
                                f"{sorted(WORKER_KEYS)}, not the speed trace")
        _unknown(where, e, ("at_s", "rank", *WORKER_KEYS))
        for k in ("at_s", "rank"):
            if k not in e:
                raise ScenarioError(f"missing key {where}.{k}")
        at_s = _value(f"{where}.at_s", e["at_s"], (float, _nonneg, ">= 0"))
        rank = _value(f"{where}.rank", e["rank"], (int, _nonneg, ">= 0"))
        if rank >= len(workers):
            raise ScenarioError(f"{where}.rank = {rank}: must be < the number of workers ({len(workers)})")
        changes = {k: _value(f"{where}.{k}", v, WORKER_KEYS[k]) for k, v in e.items() if k in WORKER_KEYS}
        if not changes:
            raise ScenarioError(f"{where}: changes nothing; give at least one of {sorted(WORKER_KEYS)}")
        events.append(Event(at_s, rank, changes))
    events.sort(key=lambda ev: ev.at_s)
    return Scenario(workers=tuple(workers), events=tuple(events), source=source, **top)


def parse_scenario(text: str, source: str = "<string>") -> Scenario:
    """Parse TOML text into a validated Scenario."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{source}: not valid TOML: {exc}") from exc
    try:
        return scenario_from_dict(doc, source)
    except ScenarioError as exc:
        raise ScenarioError(f"{source}: {exc}") from None


def shipped_scenarios() -> dict[str, Path]:
    """Name -> path of every scenario shipped in ``emulate/scenarios``."""
    return {p.stem: p for p in sorted(SCENARIO_DIR.glob("*.toml"))}


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a scenario from a file path or by the name of a shipped one."""
    p = Path(name_or_path)
    if not p.exists():
        shipped = shipped_scenarios()
        if str(name_or_path) in shipped:
            p = shipped[str(name_or_path)]
        else:
            raise ScenarioError(f"no scenario file {name_or_path!r}; shipped: {sorted(shipped)}")
    return parse_scenario(p.read_text(), source=str(p))


def override(sc: Scenario, **changes: Any) -> Scenario:
    """A copy with top-level fields replaced (e.g. a shorter max_time_s for tests)."""
    return replace(sc, **{k: v for k, v in changes.items() if v is not None})


__all__ = ["Scenario", "WorkerSpec", "Event", "ScenarioError", "parse_scenario", "load_scenario",
           "shipped_scenarios", "scenario_from_dict", "override", "WORKLOADS"]
