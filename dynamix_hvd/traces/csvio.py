"""Strict CSV reading for the trace loaders: every problem names the file, the row and the column.

Rows are numbered as a spreadsheet shows them: the header is row 1, the first data row is row 2.
"""
from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from dynamix_hvd.errors import DynamixError


class TraceError(DynamixError, ValueError):
    """A trace file is missing, malformed or inconsistent (the message names file, row and column)."""

    def __init__(self, path: str | os.PathLike, message: str, row: int | None = None,
                 column: str | None = None) -> None:
        self.path, self.row, self.column = str(path), row, column
        where = str(path)
        if row is not None:
            where += f", row {row}"
        if column is not None:
            where += f", column {column!r}"
        super().__init__(f"{where}: {message}")


def read_rows(path: str | os.PathLike) -> tuple[list[str], list[list[str]]]:
    """(header, data rows) of a CSV file; a missing, unreadable or empty file raises TraceError."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(p, "file not found")
    try:
        with open(p, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(p, f"cannot be read as CSV ({type(exc).__name__}: {exc})") from exc
    rows = [r for r in rows if any(c.strip() for c in r)]      # blank lines carry nothing
    if not rows:
        raise TraceError(p, "empty file (no header)")
    header = [c.strip() for c in rows[0]]
    if len(rows) < 2:
        raise TraceError(p, "no data rows after the header", row=1)
    return header, rows[1:]


def parse_float(path: str | os.PathLike, text: str, row: int, column: str, allow_empty: bool = False) -> float:
    """A finite float from one cell; NaN for an empty cell when ``allow_empty``."""
    t = text.strip()
    if not t:
        if allow_empty:
            return math.nan
        raise TraceError(path, "empty cell (a number is needed)", row, column)
    try:
        v = float(t)
    except ValueError:
        raise TraceError(path, f"non-numeric value {t!r}", row, column) from None
    if not math.isfinite(v):
        raise TraceError(path, f"value {t!r} is not finite", row, column)
    return v


def read_columns(path: str | os.PathLike, required: Sequence[str], text_columns: Sequence[str] = ()
                 ) -> dict[str, np.ndarray | list[str]]:
    """The required columns of a CSV file with a header: float arrays, or lists of str for
    ``text_columns``. Missing columns, short rows and non-numeric cells raise TraceError."""
    header, rows = read_rows(path)
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceError(path, f"missing column(s) {missing}; the header has {header}", row=1, column=missing[0])
    idx = {c: header.index(c) for c in required}
    out: dict[str, np.ndarray | list[str]] = {}
    for c in required:
        j = idx[c]
        vals: list = []
        for k, r in enumerate(rows):
            rownum = k + 2
            if j >= len(r):
                raise TraceError(path, f"row has {len(r)} cells, column {c!r} is cell {j + 1}", rownum, c)
            if c in text_columns:
                if not r[j].strip():
                    raise TraceError(path, "empty cell", rownum, c)
                vals.append(r[j].strip())
            else:
                vals.append(parse_float(path, r[j], rownum, c))
        out[c] = vals if c in text_columns else np.asarray(vals, dtype=np.float64)
    return out


def check_increasing(path: str | os.PathLike, values: np.ndarray, column: str, rows: Sequence[int] | None = None,
                     strict: bool = True) -> None:
    """Raise TraceError at the first row where ``values`` stops increasing."""
    v = np.asarray(values, dtype=float)
    bad = np.nonzero(np.diff(v) <= 0 if strict else np.diff(v) < 0)[0]
    if bad.size:
        k = int(bad[0]) + 1
        row = rows[k] if rows is not None else k + 2
        raise TraceError(path, f"{column} is not {'strictly ' if strict else ''}increasing "
                               f"({v[k - 1]:g} then {v[k]:g})", row, column)


def _refuse_first(path: str | os.PathLike, v: np.ndarray, bad: np.ndarray, column: str, message: str) -> None:
    """Raise TraceError at the first data row where ``bad`` holds (``message`` formats its value ``{v}``)."""
    rows = np.nonzero(bad)[0]
    if rows.size:
        k = int(rows[0])
        raise TraceError(path, message.format(v=f"{v[k]:g}"), k + 2, column)


def check_positive(path: str | os.PathLike, values: np.ndarray, column: str, allow_zero: bool = False) -> None:
    v = np.asarray(values, dtype=float)
    _refuse_first(path, v, v < 0 if allow_zero else v <= 0, column,
                  f"value {{v}} must be {'>= 0' if allow_zero else '> 0'}")


def check_at_least(path: str | os.PathLike, values: np.ndarray, column: str, minimum: float, what: str) -> None:
    """Raise TraceError at the first row whose value is below ``minimum`` (``what`` says what that is)."""
    v = np.asarray(values, dtype=float)
    _refuse_first(path, v, ~(v >= minimum), column, f"{column} {{v}} is below {what}")
