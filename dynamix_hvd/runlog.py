"""Run logs on disk: the readers shared by the bench, the report and the benchmarks.

``events.jsonl`` (rank 0, one decision or event per line; written by ``observe.RunLogger``),
``rank<R>.jsonl`` (the bench worker, one line per step) and ``evals.jsonl`` (the bench worker,
one line per evaluation) are JSON lines; a line cut by a killed run is skipped.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file ([] when it does not exist); cut lines are skipped."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut by a killed run
    return out


def rank_logs(run_dir: Path) -> list[list[dict[str, Any]]]:
    """Per rank (in rank order) the step records of ``rank<R>.jsonl`` in ``run_dir``."""
    files = sorted(Path(run_dir).glob("rank*.jsonl"), key=lambda p: int(p.stem[4:]))
    return [read_jsonl(f) for f in files]
