"""Horovod elastic (Gloo) with dynamix, live: `horovodrun --min-np/--max-np` on localhost with a
host-discovery script whose answer the test changes while the job runs.

Single-host elastic needs `--network-interface lo`: without it Horovod 0.28.1's driver waits
(HOROVOD_ELASTIC_TIMEOUT, default 600 s) for a second host to compare network interfaces and
looks hung.

The example's rank 0 logs each committed step as `epoch step world sizes idx...`; see
examples/elastic_mnist1d.py.
"""
from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from conftest import REPO, job_env

EXAMPLE = str(REPO / "examples" / "elastic_mnist1d.py")
SAMPLES = 2000                       # mnist1d keeps 80% for training
TRAIN = int(SAMPLES * 0.8)
JOB_TIMEOUT = 170                    # s, the whole horovodrun job


def _horovodrun() -> str:
    exe = shutil.which("horovodrun", path=job_env()["PATH"])
    if exe is None:
        pytest.skip("horovodrun not found (install the 'horovod' extra: scripts/setup_env.sh)")
    return exe


def _read_log(log_dir: Path) -> list[tuple[int, int, int, tuple[int, ...], list[int]]]:
    """Committed steps (epoch, step, world, sizes, indices) from every committed.<pid> file, by step."""
    rows = []
    for f in log_dir.glob("committed.*"):
        for line in f.read_text().splitlines():
            epoch, step, world, sizes, *idx = line.split()
            rows.append((int(epoch), int(step), int(world), tuple(int(s) for s in sizes.split(",")),
                         [int(i) for i in idx]))
    return sorted(rows, key=lambda r: r[1])


def _run_elastic(tmp_path: Path, np_start: int, hosts_before: str, change_after_steps: int,
                 change: Callable[[subprocess.Popen], None], epochs: int = 2,
                 env_extra: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """Start the elastic example with `hosts_before` discovered; once `change_after_steps`
    steps are committed, call `change(proc)` (edit the hosts file, kill a worker, ...)."""
    horovodrun = _horovodrun()
    hosts = tmp_path / "hosts.txt"
    hosts.write_text(hosts_before)
    disc = tmp_path / "discover_hosts.sh"
    disc.write_text(f"#!/bin/sh\ncat '{hosts}'\n")
    disc.chmod(0o755)
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    cmd = [horovodrun, "-np", str(np_start), "--min-np", "2", "--max-np", "3", "--network-interface", "lo",
           "--host-discovery-script", str(disc),
           sys.executable, EXAMPLE, "--epochs", str(epochs), "--samples", str(SAMPLES), "--base-batch", "16",
           "--step-sleep", "0.2", "--log-dir", str(log_dir)]
    env = job_env()
    env["HOROVOD_ELASTIC_TIMEOUT"] = "60"   # a missing slot fails the job instead of waiting 600 s
    env.update(env_extra or {})
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = t0 + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if len(_read_log(log_dir)) >= change_after_steps:
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the job ended before the change"
        assert len(_read_log(log_dir)) >= change_after_steps, "no training progress within 120 s"
        change(proc)
        out, err = proc.communicate(timeout=max(1.0, JOB_TIMEOUT - (time.monotonic() - t0)))
    except BaseException as exc:
        os.killpg(proc.pid, signal.SIGKILL)   # horovodrun and its workers: its own session
        out, err = proc.communicate()
        raise AssertionError(f"elastic job failed before it finished ({exc!r})\n{out[-3000:]}\n{err[-3000:]}") from None
    elapsed = time.monotonic() - t0
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), elapsed


def _write_hosts(tmp_path: Path, text: str) -> Callable[[subprocess.Popen], None]:
    return lambda proc: (tmp_path / "hosts.txt").write_text(text)


def _check_exact_once(rows, epochs: int) -> None:
    """Each committed step logged once, steps 0..n-1 without gaps, and each epoch's committed
    steps together hold every training index exactly once."""
    steps = collections.Counter(r[1] for r in rows)
    twice = sorted(s for s, c in steps.items() if c > 1)
    gaps = sorted(set(range(max(steps) + 1)) - set(steps)) if steps else []
    assert rows and not twice and not gaps, f"{len(rows)} committed steps; repeated {twice[:10]}, missing {gaps[:10]}"
    for e in range(epochs):
        idx = [i for r in rows if r[0] == e for i in r[4]]
        counts = collections.Counter(idx)
        repeated = sorted(i for i, c in counts.items() if c > 1)
        missing = sorted(set(range(TRAIN)) - set(counts))
        assert not repeated and not missing and len(idx) == TRAIN, (
            f"epoch {e}: {len(repeated)} indices repeated (e.g. {repeated[:5]}), "
            f"{len(missing)} missing (e.g. {missing[:5]})")


def _check_resize(rows, before: int, after: int) -> int:
    """World `before` for a prefix of the committed steps, `after` for the rest, each step's
    sizes from a plan for the world it ran on, global batch kept across the change. Returns
    the index of the first step on the new world."""
    worlds = [r[2] for r in rows]
    assert worlds[0] == before, worlds
    assert worlds[-1] == after, f"world size never became {after}: {worlds}"
    k = worlds.index(after)
    assert worlds == [before] * k + [after] * (len(rows) - k), f"world size not {before} then {after}: {worlds}"
    for epoch, step, world, sizes, idx in rows:
        assert len(sizes) == world, f"step {step} on {world} workers used a plan for {len(sizes)}: {sizes}"
        assert sum(sizes) == len(idx) and all(s > 0 for s in sizes), (step, sizes)
    last_old, first_new = rows[k - 1], rows[k]

    def full(r) -> bool:  # not an epoch's shortened last step
        return sum(1 for x in rows if x[0] == r[0] and x[1] > r[1]) > 0
    if full(last_old) and full(first_new):
        assert sum(first_new[3]) == sum(last_old[3]), f"global batch changed on resize: {last_old[3]} -> {first_new[3]}"
    return k


def test_elastic_remove_worker_replans_and_stays_exact_once(tmp_path):
    """3 workers; the discovery script then offers 2 slots: one worker leaves, the other two
    re-plan for a world of 2 and finish the job; every index of each epoch is trained exactly
    once by the committed steps."""
    epochs = 2
    proc, elapsed = _run_elastic(tmp_path, 3, "localhost:3\n", 5, _write_hosts(tmp_path, "localhost:2\n"), epochs)
    assert proc.returncode == 0, f"exit {proc.returncode} after {elapsed:.0f} s\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    rows = _read_log(tmp_path / "log")
    _check_exact_once(rows, epochs)
    k = _check_resize(rows, before=3, after=2)
    first_new = rows[k]
    assert any(r[0] == first_new[0] for r in rows[:k]), (
        f"the worker left at an epoch boundary (step {first_new[1]}): the test wants it mid-epoch")
    assert "world changed: 2 workers, plan [" in proc.stdout, proc.stdout[-3000:]
    assert "finished on 2 workers" in proc.stdout, proc.stdout[-3000:]


def test_elastic_add_worker_replans_and_stays_exact_once(tmp_path):
    """2 workers; the discovery script then offers 3 slots: a new worker joins, receives the
    state from rank 0, and the three re-plan; exact-once coverage holds."""
    epochs = 2
    proc, elapsed = _run_elastic(tmp_path, 2, "localhost:2\n", 5, _write_hosts(tmp_path, "localhost:3\n"), epochs)
    assert proc.returncode == 0, f"exit {proc.returncode} after {elapsed:.0f} s\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    rows = _read_log(tmp_path / "log")
    _check_exact_once(rows, epochs)
    _check_resize(rows, before=2, after=3)
    assert "world changed: 3 workers, plan [" in proc.stdout, proc.stdout[-3000:]
    assert "finished on 3 workers" in proc.stdout, proc.stdout[-3000:]


def test_elastic_killed_worker_restores_replans_and_stays_exact_once(tmp_path):
    """A worker is SIGKILLed mid-step: the others get a Horovod error, restore the last commit
    (model, optimizer, sampler position, plan), its host is blacklisted, and the two left
    re-plan for a world of 2 and redo the lost step; exact-once coverage holds.

    Horovod blacklists the failed worker's whole host, so the third slot is on a second host
    name for this machine (127.0.0.1 next to localhost). The victim must not be rank 0, the
    only rank that logs (a step it trained but did not log would look missing): with
    PYTHONHASHSEED=0 Horovod orders `localhost` first, so rank 0 runs there."""
    import psutil

    victims: list[int] = []

    def kill_worker_on_second_host(proc: subprocess.Popen) -> None:
        log_dir = tmp_path / "log"
        logging_pids = {int(f.suffix[1:]) for f in log_dir.glob("committed.*") if f.stat().st_size > 0}
        for child in psutil.Process(proc.pid).children(recursive=True):
            try:
                if (child.environ().get("HOROVOD_HOSTNAME") == "127.0.0.1"
                        and any(a.endswith("elastic_mnist1d.py") for a in child.cmdline())):
                    victims.append(child.pid)
            except psutil.Error:
                continue
        assert len(victims) == 1, f"expected one worker on host 127.0.0.1, found {victims}"
        assert victims[0] not in logging_pids, "the worker on 127.0.0.1 is rank 0: Horovod ordered the hosts otherwise"
        os.kill(victims[0], signal.SIGKILL)

    epochs = 2
    proc, elapsed = _run_elastic(tmp_path, 3, "localhost:2\n127.0.0.1:1\n", 8, kill_worker_on_second_host, epochs,
                                 env_extra={"PYTHONHASHSEED": "0", "HOROVOD_GLOO_TIMEOUT_SECONDS": "15"})
    assert proc.returncode == 0, f"exit {proc.returncode} after {elapsed:.0f} s\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    rows = _read_log(tmp_path / "log")
    _check_exact_once(rows, epochs)
    _check_resize(rows, before=3, after=2)
    assert "world changed: 2 workers, plan [" in proc.stdout, proc.stdout[-3000:]
    assert "finished on 2 workers" in proc.stdout, proc.stdout[-3000:]
