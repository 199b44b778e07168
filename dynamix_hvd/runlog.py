"""Run logs on disk: the typed records, the writer of ``events.jsonl`` and the readers used by
the report, the bench and the benchmarks.

Files of a run directory (JSON lines unless said):

- ``events.jsonl`` (rank 0, written by ``EventsWriter`` from ``observe.RunLogger``'s thread): one
  ``DecisionRecord`` per decision, and one ``EventRecord`` per event (``{"step", KIND: detail}``
  with KIND ``fallback`` (a controller could not be built), ``oom``, ``world_change`` or
  ``checkpoint_error`` (a checkpoint write failed and ``checkpoint_on_error='continue'``) or
  ``decision_dropped`` (a decision in flight, ``decision_lag``, discarded: why, and after which step it gathered)
  or ``stop`` (a rank got a stop signal, ``stop_on_signal``: which ranks, the checkpoint written or None));
- ``rank<R>.jsonl`` (the bench worker, one ``StepRecord`` per step), ``evals.jsonl`` (the bench
  worker, one ``EvalRecord`` per evaluation) and ``summary.json`` (one JSON object, ``RunSummary``).

The readers are strict about the schema: a record with an unknown field, or without a required
one, raises ``LogFormatError`` naming the file and the line. A line that is not JSON at all (cut
by a killed run) is skipped, as before.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

import numpy as np

from dynamix_hvd.plan import Plan
from dynamix_hvd.records import GlobalStats, WorkerStats

EVENT_KINDS = ("fallback", "oom", "world_change", "checkpoint_error", "decision_dropped", "stop")
T = TypeVar("T")


class LogFormatError(ValueError):
    """A run-log record that does not match its schema (the message names file and line)."""


# ============================================================================ records
@dataclass
class DecisionRecord:
    """One decision of rank 0 (``decide.Decider.decide`` fills it; the hook adds ``t``, ``step``,
    ``early``; the writer adds ``lr``)."""

    step: int                       # the decision's global step (plans from it on)
    t: float                        # seconds since the hook started
    controller: str                 # the controller that decided (after any fallback)
    decide_ms: float                # time in the controller + limits + next_plan
    plan: list[int]                 # the plan in force before the decision
    proposed: list[float]           # the controller's proposal after the move limits
    next_plan: Plan                 # the decided plan (== plan when it stays)
    glob: GlobalStats               # job-wide statistics of the interval
    workers: list[WorkerStats]      # one row per rank
    goodput: float                  # measured samples/s x E(B) of the interval
    reason: str | None              # why the controller proposed what it did (+ limit notes)
    lr: float | None = None         # learning rate of parameter group 0 at the decision
    early: dict[str, Any] | None = None      # {"ranks": [...]}: an early decision, flagged ranks
    cluster_slowdown: float | None = None    # unexplained slowdown against the previous decision
    fallback: dict[str, Any] | None = None   # {"from", "to", "reason"[, "global_batch"]}
    guard_revert: dict[str, Any] | None = None   # {"controller", "global_batch", "reason", "retries_left"}
    controller_error: str | None = None      # repr of the controller's exception (plan unchanged)
    finetune: dict[str, Any] | None = None   # online fine-tuning counters
    reward: float | None = None              # fine-tuning: reward of the previous action
    policy: str | None = None                # a learned policy: what became of its choice (ppo.POLICY_OUTCOMES)

    @property
    def plan_changed(self) -> bool:
        return list(self.plan) != list(self.next_plan.batch_sizes)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the line (optional fields only when set)."""
        d: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None and f.default is None:
                continue
            if f.name == "next_plan":
                v = v.to_dict()
            elif f.name == "glob":
                v = dataclasses.asdict(v)
            elif f.name == "workers":
                v = [dataclasses.asdict(w) for w in v]
            d[f.name] = v
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "DecisionRecord":
        """From the hook's record (dataclass or dict values) or a parsed line; TypeError / KeyError
        / ValueError name what is wrong."""
        d = dict(d)
        _check_fields(DecisionRecord, d)
        np_ = d["next_plan"]
        d["next_plan"] = np_ if isinstance(np_, Plan) else Plan.from_dict(np_)
        g = d["glob"]
        d["glob"] = g if isinstance(g, GlobalStats) else _build(GlobalStats, g, "glob")
        d["workers"] = [w if isinstance(w, WorkerStats) else _build(WorkerStats, w, f"workers[{i}]")
                        for i, w in enumerate(d["workers"])]
        return DecisionRecord(**d)


@dataclass
class EventRecord:
    """A non-decision event of rank 0: ``{"step": S, KIND: detail}`` on disk."""

    step: int
    kind: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, self.kind: self.detail}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "EventRecord":
        kinds = [k for k in d if k != "step"]
        if "step" not in d or len(kinds) != 1 or kinds[0] not in EVENT_KINDS:
            raise ValueError(f"an event has a 'step' and one of {list(EVENT_KINDS)}; got fields {sorted(d)}")
        return EventRecord(int(d["step"]), kinds[0], dict(d[kinds[0]]))


@dataclass
class StepRecord:
    """One training step of one rank (the bench worker's ``rank<R>.jsonl``)."""

    t: float              # training clock (evaluation excluded)
    step: int
    b: int                # this rank's batch
    B: int                # the step's global batch
    compute_s: float
    step_s: float
    full: bool = True     # False for an epoch's short last steps


@dataclass
class EvalRecord:
    """One evaluation on rank 0 (the bench worker's ``evals.jsonl``)."""

    t: float              # training clock
    step: int
    acc: float
    samples: int
    wall: float
    plan: list[int]


@dataclass
class RunSummary:
    """The bench worker's ``summary.json``."""

    scenario: str
    controller: str
    time_to_target_s: float | None
    final_accuracy: float
    train_time_s: float
    steps: int
    samples: int
    samples_per_s: float
    wall_s: float
    world_size: int
    events_applied: list[dict[str, Any]]
    final_plan: list[int]
    seed: int | None = None       # model initialisation and sample order (absent before session 13)


def _check_fields(cls: type, d: Mapping[str, Any]) -> None:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - set(fields))
    missing = [n for n, f in fields.items() if n not in d and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if unknown or missing:
        raise ValueError(f"{cls.__name__}: " + "; ".join(
            ([f"unknown field(s) {unknown}"] if unknown else []) + ([f"missing field(s) {missing}"] if missing else [])))


def _build(cls: Callable[..., T], d: Any, where: str = "") -> T:
    if not isinstance(d, Mapping):
        raise ValueError(f"{where or cls.__name__}: expected an object, got {type(d).__name__}")
    try:
        _check_fields(cls, d)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}" if where else str(exc)) from None
    return cls(**d)


def parse_event_line(d: Mapping[str, Any]) -> DecisionRecord | EventRecord:
    """A parsed line of ``events.jsonl``: a decision (it has ``next_plan``) or an event."""
    return DecisionRecord.from_dict(d) if "next_plan" in d else EventRecord.from_dict(d)


# ============================================================================ writer
def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def to_line(record: DecisionRecord | EventRecord) -> str:
    return json.dumps(record.to_dict(), default=_json_default) + "\n"


class EventsWriter:
    """Appends records to ``run_dir/events.jsonl`` (line-buffered); the hook's record dicts are
    checked against the schema here, so a field the readers do not know fails at the writer."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / "events.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "a", buffering=1)  # noqa: SIM115

    def decision(self, record: Mapping[str, Any], lr: float | None = None) -> DecisionRecord:
        rec = DecisionRecord.from_dict({**record, "lr": lr} if lr is not None else record)
        self._f.write(to_line(rec))
        return rec

    def event(self, record: Mapping[str, Any]) -> EventRecord:
        rec = EventRecord.from_dict(record)
        self._f.write(to_line(rec))
        return rec

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()


# ============================================================================ readers
def bench_run_dir(out: Path, name: str, rep: int = 0) -> Path:
    """The directory of bench entry ``name``'s repeat ``rep`` (0-based) under ``out``
    (``dynamix bench``): ``NAME``, ``NAME.r1``, ...; a policy path in the name (``ppo=PATH``) is
    flattened, not a directory of the bench."""
    safe = name.replace("/", "_")
    return Path(out) / (safe if rep == 0 else f"{safe}.r{rep}")


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file ([] when it does not exist); cut lines are skipped.
    Untyped: prefer the typed readers below."""
    return [d for _, d in _lines(Path(path))]


def _lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    if not path.exists():
        return []
    out = []
    for no, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.strip()
        if line:
            try:
                out.append((no, json.loads(line)))
            except json.JSONDecodeError:
                pass  # a line cut by a killed run
    return out


def _read(path: Path | str, parse: Callable[[dict[str, Any]], T]) -> list[T]:
    path = Path(path)
    out = []
    for no, d in _lines(path):
        try:
            out.append(parse(d))
        except (TypeError, ValueError, KeyError) as exc:
            raise LogFormatError(f"{path}:{no}: {exc}") from None
    return out


def read_events(path: Path | str) -> list[DecisionRecord | EventRecord]:
    """Every record of an ``events.jsonl`` (a run directory or the file), in order."""
    path = Path(path)
    return _read(path / "events.jsonl" if path.is_dir() else path, parse_event_line)


def read_decisions(path: Path | str) -> list[DecisionRecord]:
    """The decision records of an ``events.jsonl`` (a run directory or the file)."""
    return [r for r in read_events(path) if isinstance(r, DecisionRecord)]


def read_steps(path: Path | str) -> list[StepRecord]:
    return _read(path, lambda d: _build(StepRecord, d))


def rank_logs(run_dir: Path | str) -> list[list[StepRecord]]:
    """Per rank (in rank order) the step records of ``rank<R>.jsonl`` in ``run_dir``."""
    files = sorted(Path(run_dir).glob("rank*.jsonl"), key=lambda p: int(p.stem[4:]))
    return [read_steps(f) for f in files]


def read_evals(path: Path | str) -> list[EvalRecord]:
    """The evaluations of an ``evals.jsonl`` (a run directory or the file)."""
    path = Path(path)
    return _read(path / "evals.jsonl" if path.is_dir() else path, lambda d: _build(EvalRecord, d))


def read_summary(run_dir: Path | str) -> RunSummary:
    path = Path(run_dir) / "summary.json"
    try:
        return _build(RunSummary, json.loads(path.read_text()))
    except (TypeError, ValueError) as exc:
        raise LogFormatError(f"{path}: {exc}") from None
