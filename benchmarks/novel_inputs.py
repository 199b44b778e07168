"""`dynamix replay` on novel but plausible inputs: each is accepted with a result, or refused cleanly.

Why: external evaluators run `dynamix replay` on workloads and speed traces that are not in this
repository, in the same formats (a Pollux workload directory; a PAI per-worker CSV; the CoV table).
What: 31 such inputs derived from the shipped data in a temporary directory (nothing downloaded):
workload variants (few validation files, non-power-of-two batches, a decreasing, rescaled or negated
metric, short and long runs, reordered/extra columns, CRLF and an index column, zero gradient rows,
few placement rows, scalability only, one workload's curves with another's placements, N=100), PAI
variants (3 and 16 workers, no index column, sparse rows, a stride change, one very slow worker),
CoV variants (few columns, ragged rows) and inputs that must be refused (a flat run without
--target, local_bsz below one sample, shuffled PAI rows, non-numeric cells). Each case is one
subprocess (static, goodput, ppo) with a timeout. Prints a Markdown table: exit code, seconds,
ppo/goodput (median ratio, paired interval) and, for a refusal, the error's first line and whether
it names the offending file. Exit 1 if a case crashed (a traceback, a timeout, a refusal expected
but not produced or an acceptance refused). About 3 minutes with the defaults (one process).

    .venv/bin/python benchmarks/novel_inputs.py [--seeds 3] [--timeout 300] [--only cifar]
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

REPO = Path(__file__).resolve().parents[1]
POLLUX = REPO / "dynamix_hvd" / "traces" / "data" / "pollux"
HELDOUT = REPO / "benchmarks" / "heldout_workloads"
PAI = REPO / "dynamix_hvd" / "traces" / "data" / "pai"
CIFAR, DS2, BERT, YOLO = POLLUX / "cifar10", POLLUX / "deepspeech2", POLLUX / "bert", HELDOUT / "yolov3"
PL, SC, COV = "placements.csv", "scalability.csv", "coefficient_variation.csv"


def fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


@dataclass(frozen=True)
class Table:
    """A CSV as strings; every edit returns a new table."""
    header: list[str]
    rows: list[list[str]]

    @staticmethod
    def read(path: Path) -> Table:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        return Table(rows[0], rows[1:])

    def col(self, name: str) -> np.ndarray:
        j = self.header.index(name)
        return np.array([float(r[j]) for r in self.rows])

    def with_col(self, name: str, values: Sequence[object]) -> Table:
        j = self.header.index(name)
        cell = lambda v: v if isinstance(v, str) else fmt(float(v))  # noqa: E731
        return Table(self.header, [r[:j] + [cell(v)] + r[j + 1:] for r, v in zip(self.rows, values)])

    def where(self, keep: Sequence[bool]) -> Table:
        return Table(self.header, [r for r, k in zip(self.rows, keep) if k])

    def select(self, cols: Sequence[str]) -> Table:
        idx = [self.header.index(c) for c in cols]
        return Table(list(cols), [[r[i] for i in idx] for r in self.rows])

    def write(self, path: Path, index: bool = False, crlf: bool = False) -> None:
        with open(path, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\r\n" if crlf else "\n")
            w.writerow([""] + self.header if index else self.header)
            w.writerows([str(i)] + r if index else r for i, r in enumerate(self.rows))


Edit = Callable[[Table, str], Table]


def vals(src: Path) -> list[str]:
    return sorted(p.name for p in src.glob("validation-*.csv"))


def derived(d: Path, src: Path, files: Sequence[str] = (), val: Edit | None = None,
            pl: Callable[[Table], Table] | None = None, rename: dict[int, int] | None = None) -> Path:
    """Workload directory ``d``: ``files`` copied from ``src``, its validation files edited by ``val``
    or renamed to other batch sizes by ``rename``, its placements edited by ``pl``."""
    d.mkdir()
    for f in files:
        shutil.copy(src / f, d / f)
    for f in vals(src) if val else ():
        val(Table.read(src / f), f).write(d / f)
    for old, new in (rename or {}).items():
        shutil.copy(src / f"validation-{old}.csv", d / f"validation-{new}.csv")
    if pl:
        pl(Table.read(src / PL)).write(d / PL)
    return d


def mixed(d: Path, vsrc: Path, psrc: Path) -> Path:
    """``vsrc``'s validation files with ``psrc``'s placements."""
    derived(d, psrc, [PL])
    for f in vals(vsrc):
        shutil.copy(vsrc / f, d / f)
    return d


def longer(t: Table, _: str) -> Table:
    """900 more epochs on a near-plateau (the metric creeps up by 1e-4 log(1+i))."""
    it, m = t.col("iteration"), t.col("metric")
    last, step = dict(zip(t.header, t.rows[-1])), it[-1] - it[-2]
    new = {"progress": lambda i: "", "iteration": lambda i: fmt(it[-1] + step * i),
           "metric": lambda i: fmt(m[-1] + 1e-4 * math.log1p(i))}
    return Table(t.header, t.rows + [[new[h](i) if h in new else last[h] for h in t.header] for i in range(1, 901)])


def zero_grads(t: Table, _: str) -> Table:
    gs, gv = t.col("grad_sqr"), t.col("grad_var")
    gs[::3], gv[1::4] = 0.0, 0.0
    return t.with_col("grad_sqr", gs).with_col("grad_var", gv)


def reorder(t: Table, _: str) -> Table:
    cols = ["grad_var", "metric", "iteration", "grad_sqr"]
    return Table(cols + ["epoch"], [r + [str(i)] for i, r in enumerate(t.select(cols).rows)])


def with_cell(t: Table, i: int, name: str, value: str) -> Table:
    return t.with_col(name, [value if k == i else r[t.header.index(name)] for k, r in enumerate(t.rows)])


def crlf_index(d: Path, src: Path) -> Path:
    d.mkdir()
    for p in src.glob("*.csv"):
        Table.read(p).write(d / p.name, index=True, crlf=True)
    return d


def sixteen(t: Table) -> Table:
    """Workers 0..5 copied as 10..15, 10 % slower: 16 workers."""
    w, bt = t.col("worker"), t.col("batch_time_norm")
    extra = t.where(w < 6).with_col("worker", w[w < 6] + 10).with_col("batch_time_norm", np.round(bt[w < 6] * 1.1))
    return Table(t.header, t.rows + extra.rows).with_col("", range(len(t.rows) + len(extra.rows)))


def ragged(t: Table) -> Table:
    """The first 20 jobs, job k's cells empty from column 50 + 7k on."""
    return Table(t.header, [r[:50 + 7 * k] + [""] * (len(r) - 50 - 7 * k) for k, r in enumerate(t.rows[:20])])


Build = Callable[[Path], tuple[str, str]]   # case directory -> (--workload, --speed-trace)


@dataclass(frozen=True)
class Case:
    name: str
    varied: str
    build: Build
    workers: int = 8
    refuse: bool = False


def wl(make: Callable[[Path], Path], trace: str = "none") -> Build:
    return lambda root: (str(make(root / "wl")), trace)


def pai(edit: Callable[[Table], Table], src: str = "job_3_norm.csv", prefix: str = "") -> Build:
    def build(root: Path) -> tuple[str, str]:
        edit(Table.read(PAI / src)).write(root / src)
        return "cifar10", f"{prefix}{root / src}"
    return build


def cases() -> list[Case]:
    V, two = vals(CIFAR), ["validation-128.csv", "validation-4096.csv", PL, SC]
    metric = lambda fn: lambda t, f: t.with_col("metric", fn(t.col("metric")))  # noqa: E731
    worker = lambda t: t.col("worker")  # noqa: E731
    return [
        Case("cifar_2val", "2 validation files (B=128, 4096)", wl(lambda d: derived(d, CIFAR, two))),
        Case("cifar_2val_n100", "the same, PAI job 3, N extrapolated",
             wl(lambda d: derived(d, CIFAR, two), "job_3_norm"), workers=100),
        Case("cifar_1val", "1 validation file, no scalability.csv",
             wl(lambda d: derived(d, CIFAR, ["validation-512.csv", PL]))),
        Case("ds2_nonpow2", "batches 24..768 (names x1.2)", wl(lambda d: derived(
            d, DS2, [PL], rename={20: 24, 40: 48, 80: 96, 160: 192, 320: 384, 640: 768}))),
        Case("cifar_odd", "batches 100, 300, 500, 1000, 2000, 3000", wl(lambda d: derived(
            d, CIFAR, [PL, SC], rename={128: 100, 256: 300, 512: 500, 1024: 1000, 2048: 2000, 4096: 3000}))),
        Case("cifar_loss", "decreasing metric (-3 log accuracy)", wl(lambda d: derived(
            d, CIFAR, [PL, SC], val=metric(lambda m: -3 * np.log(np.clip(m, 1e-3, 1)))))),
        Case("bert_scaled", "metric / 100", wl(lambda d: derived(d, BERT, [PL], val=metric(lambda m: m / 100)))),
        Case("cifar_negmetric", "metric x -100", wl(lambda d: derived(d, CIFAR, [PL], val=metric(lambda m: -100 * m)))),
        Case("cifar_short3", "3 epochs per run", wl(lambda d: derived(
            d, CIFAR, [PL, SC], val=lambda t, f: Table(t.header, t.rows[:3])))),
        Case("cifar_long", "+900 near-flat epochs per run", wl(lambda d: derived(d, CIFAR, [PL, SC], val=longer))),
        Case("cifar_reorder", "columns reordered, no progress, extra epoch", wl(lambda d: derived(
            d, CIFAR, [PL], val=reorder))),
        Case("cifar_crlf_index", "CRLF line ends and an index column, every file", wl(lambda d: crlf_index(d, CIFAR))),
        Case("cifar_gradzero", "grad_sqr 0 every 3rd row, grad_var every 4th", wl(lambda d: derived(
            d, CIFAR, [PL], val=zero_grads))),
        Case("cifar_fewpl", "placements 1 and 2 only", wl(lambda d: derived(
            d, CIFAR, V, pl=lambda p: p.where([r[0] in ("1", "2") for r in p.rows])))),
        Case("cifar_pl1row", "a single placements row", wl(lambda d: derived(
            d, CIFAR, V, pl=lambda p: Table(p.header, p.rows[:1])))),
        Case("cifar_scalonly", "scalability.csv, no placements.csv", wl(lambda d: derived(d, CIFAR, V + [SC]))),
        Case("yoloval_cifarpl", "YOLOv3 curves, cifar10 placements", wl(lambda d: mixed(d, YOLO, CIFAR))),
        Case("dsval_yolopl", "deepspeech2 curves, YOLOv3 placements", wl(lambda d: mixed(d, DS2, YOLO))),
        Case("pai_w3_n16", "PAI: workers 0-2 only", pai(lambda t: t.where(worker(t) < 3)), workers=16),
        Case("pai_w16", "PAI: 16 workers", pai(sixteen)),
        Case("pai_noindex", "PAI: no index column", pai(lambda t: t.select(t.header[1:]))),
        Case("pai_sparse", "PAI: 30 % of rows dropped at random", pai(
            lambda t: t.where(np.random.default_rng(1).random(len(t.rows)) > 0.3))),
        Case("pai_stride100", "PAI: time x10", pai(lambda t: t.with_col("time", t.col("time") * 10))),
        Case("pai_straggler", "PAI: worker 2 20x slower", pai(lambda t: t.with_col(
            "batch_time_norm", t.col("batch_time_norm") * np.where(worker(t) == 2, 20, 1)))),
        Case("cov_few", "CoV: 5 iteration columns", pai(lambda t: t.select(t.header[:6]), COV, "cov:")),
        Case("cov_ragged", "CoV: 20 jobs, cells empty from column 50 + 7k", pai(ragged, COV, "cov:")),
        Case("refuse_flat", "one flat run (B=4096), no --target", wl(lambda d: derived(
            d, CIFAR, [PL], val=lambda t, f: t.with_col("metric", [0.3] * len(t.rows)) if "4096" in f else t)),
             refuse=True),
        Case("refuse_tinybsz", "local_bsz / 1000 (below one sample)", wl(lambda d: derived(
            d, CIFAR, V, pl=lambda p: p.with_col("local_bsz", p.col("local_bsz") / 1000))), refuse=True),
        Case("refuse_nonnumeric", "a validation cell 'n/a'", wl(lambda d: derived(
            d, CIFAR, [PL], val=lambda t, f: with_cell(t, 4, "grad_sqr", "n/a") if "512" in f else t)), refuse=True),
        Case("refuse_pai_shuffled", "PAI: rows shuffled", pai(lambda t: Table(
            t.header, [t.rows[i] for i in np.random.default_rng(1).permutation(len(t.rows))])), refuse=True),
        Case("refuse_pai_strworker", "PAI: worker ids 'worker<k>'", pai(
            lambda t: t.with_col("worker", [f"worker{r[1]}" for r in t.rows])), refuse=True),
    ]


@dataclass(frozen=True)
class Outcome:
    rc: int | str
    seconds: float
    ratio: str
    error: str
    names_file: bool
    crashed: bool


def run_case(case: Case, root: Path, seeds: int, timeout: float) -> Outcome:
    workload, trace = case.build(root)
    out = root / f"{case.name}.json"
    cmd = [sys.executable, "-m", "dynamix_hvd.cli", "replay", "--workload", workload, "--speed-trace", trace, "--workers",
           str(case.workers), "--controllers", "static,goodput,ppo", "--seeds", str(seeds), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome("timeout", time.perf_counter() - t0, "", "", False, True)
    secs, traceback = time.perf_counter() - t0, "Traceback (most recent call last)" in p.stderr + p.stdout
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    error = "" if p.returncode == 0 else next((ln for ln in lines if ln.startswith("dynamix replay:")),
                                               lines[-1] if lines else "")
    ratio = ""
    if p.returncode == 0 and out.exists():
        vs = json.loads(out.read_text())["controllers"].get("ppo", {}).get("vs_goodput")
        ratio = f"{vs['ratio']:.3f} [{vs['interval'][0]:.2f}, {vs['interval'][1]:.2f}]" if vs else "not reached"
    crashed = traceback or (p.returncode == 0) == case.refuse or p.returncode not in (0, 2)
    return Outcome(p.returncode, secs, ratio, error, str(root) in error, crashed)


def row(case: Case, o: Outcome, root: Path) -> str:
    err = o.error.replace(str(root) + os.sep, "$TMP/").replace("|", "\\|")
    cells = [case.name, case.varied, str(case.workers), "refuse" if case.refuse else "accept", str(o.rc),
             f"{o.seconds:.1f}", o.ratio, err[:200], ("yes" if o.names_file else "no") if o.error else "",
             "**CRASH**" if o.crashed else "ok"]
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="seeds per case (default 3)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per case before it counts as a crash")
    ap.add_argument("--only", default="", help="run only the cases whose name contains this text")
    args = ap.parse_args()
    selected = [c for c in cases() if args.only in c.name]
    t0 = time.perf_counter()
    print("| case | varied | N | expected | exit | s | ppo/goodput [90% paired] | error (first line) | names file | |")
    print("|---" * 10 + "|")
    crashed = []
    with tempfile.TemporaryDirectory(prefix="novel_inputs_") as tmp:
        for case in selected:
            root = Path(tmp) / case.name
            root.mkdir()
            o = run_case(case, root, args.seeds, args.timeout)
            print(row(case, o, root), flush=True)
            crashed += [case.name] * o.crashed
    print(f"\n{len(selected)} cases, {len(crashed)} crashed{': ' + ', '.join(crashed) if crashed else ''}; "
          f"{time.perf_counter() - t0:.0f} s, {args.seeds} seeds")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
