"""``dynamix report RUN_DIR``: a PNG of a run directory.

- a bench directory (``results.json`` + one sub-directory per controller): accuracy vs
  training time for every controller, then per controller the per-rank batch size and the
  per-rank compute time per step vs time -> ``RUN_DIR/report.png``;
- one bench run (``evals.jsonl``, ``rank<r>.jsonl``): the same panels for that run;
- any run of the hook (only ``events.jsonl``): per-rank batch size and step/compute time at
  each decision.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dynamix_hvd.runlog import LogFormatError, bench_run_dir, rank_logs, read_decisions, read_evals


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a bench output directory or one run directory")
    p.add_argument("--out", default=None, help="PNG path (default RUN_DIR/report.png)")


def _rank_series(run_dir: Path) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per rank: (training time, batch size, compute seconds) per step."""
    out = []
    for lg in rank_logs(run_dir):
        lg = [r for r in lg if r.full]   # hide epochs' short last steps
        if lg:
            out.append((np.array([r.t for r in lg]), np.array([r.b for r in lg]), np.array([r.compute_s for r in lg])))
    return out


def _smooth(y: np.ndarray, k: int = 10) -> np.ndarray:
    if len(y) < k:
        return y
    c = np.cumsum(np.insert(y, 0, 0.0))
    s = (c[k:] - c[:-k]) / k
    return np.concatenate([y[:k - 1], s])


def _plot_ranks(ax_b: Any, ax_c: Any, run_dir: Path, title: str) -> bool:
    series = _rank_series(run_dir)
    if series:
        for r, (t, b, c) in enumerate(series):
            ax_b.plot(t, b, lw=1.2, label=f"rank {r}")
            ax_c.plot(t, 1e3 * _smooth(c), lw=1.0, label=f"rank {r}")
        ax_b.set_xlabel("training time (s)")
        ax_c.set_xlabel("training time (s)")
    else:  # hook-only run: one point per decision
        ev = read_decisions(run_dir / "events.jsonl")
        if not ev:
            return False
        t = np.array([e.t for e in ev])
        n = len(ev[0].workers)
        for r in range(n):   # (an elastic run's decisions after a resize have another number of ranks)
            ax_b.step(t, [e.workers[r].batch_size if r < len(e.workers) else np.nan for e in ev], where="post",
                      label=f"rank {r}")
            ax_c.plot(t, [1e3 * e.workers[r].compute_s if r < len(e.workers) else np.nan for e in ev],
                      label=f"rank {r}")
        ax_b.set_xlabel("wall time (s)")
        ax_c.set_xlabel("wall time (s)")
    ax_b.set_ylabel("local batch size")
    ax_c.set_ylabel("compute ms / step (10-step mean)")
    ax_b.set_title(f"{title}: per-rank batch size", fontsize=9)
    ax_c.set_title(f"{title}: per-rank compute time per step", fontsize=9)
    ax_b.legend(fontsize=6, ncol=2)
    return True


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, png: Path) -> Path:
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return png


def plot_bench(out_dir: Path | str, png: Path | str | None = None) -> Path:
    """report.png of a bench directory; returns its path."""
    plt = _pyplot()
    out_dir = Path(out_dir)
    res = json.loads((out_dir / "results.json").read_text())
    names = [n for n, m in res["controllers"].items() if "error" not in m and bench_run_dir(out_dir, n).is_dir()]
    fig, axes = plt.subplots(1 + len(names), 2, figsize=(12, 3.0 * (1 + len(names))), squeeze=False)
    ax = axes[0, 0]
    for n in names:
        ev = read_evals(bench_run_dir(out_dir, n) / "evals.jsonl")
        if ev:
            ax.plot([e.t for e in ev], [e.acc for e in ev], label=n, lw=1.3)
    ax.axhline(res["target_accuracy"], color="k", ls="--", lw=0.8, label="target")
    ax.set_xlabel("training time (s, evaluation excluded)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"{res['scenario']}: accuracy vs time", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    ttt = [res["controllers"][n]["time_to_target_s"] for n in names]
    ax.bar(names, [t if t is not None else 0 for t in ttt],
           color=["C%d" % i for i in range(len(names))])
    for i, t in enumerate(ttt):
        ax.text(i, (t or 0), "%.1f s" % t if t is not None else "not reached", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("time to target (s)")
    ax.set_title(f"time to {res['target_accuracy']:.0%} test accuracy ({res.get('network', '')[:60]})", fontsize=8)
    for i, n in enumerate(names, start=1):
        _plot_ranks(axes[i, 0], axes[i, 1], bench_run_dir(out_dir, n), n)
    return _save(plt, fig, Path(png) if png else out_dir / "report.png")


def plot_run(run_dir: Path | str, png: Path | str | None = None) -> Path:
    """report.png of a single run directory (a bench run or any hook run with events.jsonl)."""
    plt = _pyplot()
    run_dir = Path(run_dir)
    ev = read_evals(run_dir / "evals.jsonl")
    fig, axes = plt.subplots(1, 3 if ev else 2, figsize=(15 if ev else 10, 3.5), squeeze=False)
    axes = axes[0]
    if ev:
        axes[0].plot([e.t for e in ev], [e.acc for e in ev])
        axes[0].set_xlabel("training time (s)")
        axes[0].set_ylabel("test accuracy")
        axes[0].set_title("accuracy vs time", fontsize=9)
        axes = axes[1:]
    if not _plot_ranks(axes[0], axes[1], run_dir, run_dir.name):
        plt.close(fig)
        raise FileNotFoundError(f"{run_dir}: no rank*.jsonl or events.jsonl to plot")
    return _save(plt, fig, Path(png) if png else run_dir / "report.png")


def run(args: argparse.Namespace) -> int:
    d = Path(args.run_dir)
    if not d.is_dir():
        print(f"dynamix report: {d} is not a directory", file=sys.stderr)
        return 2
    try:
        png = plot_bench(d, args.out) if (d / "results.json").exists() else plot_run(d, args.out)
    except (FileNotFoundError, LogFormatError) as exc:
        print(f"dynamix report: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {png}")
    return 0
