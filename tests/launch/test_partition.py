"""Network partition of one rank, under real mpirun with every rank in its own network namespace
(emulate/netns.py; MPI's TCP transport and out-of-band channel on the emulated links):
- down for less than stall_timeout_s: training goes on where it stopped, every index of the
  epoch is trained exactly once, and the watchdog hears the cut-off rank again (rank 0 is later
  busy for longer than stall_timeout_s: a watchdog still counting the partitioned rank as silent,
  e.g. one whose thread died on the send errors of the link that was down, would end the job);
- down for good: the stall watchdog ends the job within stall_timeout_s + a few seconds, and the
  message names the unreachable rank.
Without the watchdog (DYNAMIX_STALL_TIMEOUT_S=0) the long partition hangs the job until the
test's timeout. Skipped where network namespaces are not permitted (not root).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from dynamix_hvd.emulate import netns
from dynamix_hvd.emulate.netns import Cluster, mpmd_command
from faultrun import STALL_JOB, run_job

OK, WHY = netns.netns_available()
pytestmark = pytest.mark.skipif(not OK, reason=f"network namespaces not permitted here: {WHY}")
REPO = str(Path(__file__).resolve().parents[2])
WORLD, RANK, STEP, SAMPLES = 4, 2, 20, 3200
TIMEOUT_S = 8.0          # stall_timeout_s of these jobs
END_SLACK_S = 8.0        # heartbeat period + MPI_Abort teardown + 2 cores shared with other work


def _partition_job(tmp_path: Path, down_s: float, timeout: float, *extra: str) -> tuple:
    env = {"PYTHONPATH": REPO, "HOROVOD_CONTROLLER": "mpi", "HOROVOD_CPU_OPERATIONS": "mpi",
           "DYNAMIX_STALL_TIMEOUT_S": str(TIMEOUT_S), "DYNAMIX_MIN_DECISION_S": "0", "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, STALL_JOB, "--fault", "partition", "--fault-rank", str(RANK), "--fault-step", str(STEP),
            "--down-s", str(down_s), "--samples", str(SAMPLES), "--seen-log", str(tmp_path / "seen"), *extra]
    with Cluster([(1000.0, 0.0)] * WORLD) as c:
        cmd, full_env = mpmd_command(c, [argv] * WORLD, env)
        res = run_job(cmd, full_env, timeout=timeout, cwd=REPO)
        names = c.namespaces
    assert not set(names) & set(netns.list_namespaces())
    return res


def _seen(prefix: Path, world: int) -> list[int]:
    out = []
    for r in range(world):
        out += [int(line.split()[1]) for line in Path(f"{prefix}.{r}").read_text().splitlines()]
    return out


def test_short_partition_training_goes_on_exactly_once(tmp_path: Path) -> None:
    down, busy_step, busy_s = 3.0, 60, TIMEOUT_S + 2
    res = _partition_job(tmp_path, down, 240, "--then-busy-step", str(busy_step), "--then-busy-s", str(busy_s))
    assert res.returncode == 0, res.out[-4000:]
    assert "unreachable or frozen" not in res.out and "own link" not in res.out, res.out[-3000:]
    assert res.out.count("FINISHED") == WORLD
    gaps = [float(g) for g in re.findall(rf"before step {busy_step} ([0-9.]+) s", res.out)]
    assert len(gaps) == WORLD and min(gaps) >= down - 0.5, gaps     # the link really was down: every rank waited
    assert max(gaps) < TIMEOUT_S, gaps
    busy = [float(g) for g in re.findall(r"longest step gap ([0-9.]+) s", res.out)]
    assert min(busy) >= busy_s - 0.5, busy        # and rank 0 really was busy past stall_timeout_s later
    m = re.search(r"dynamix: stall watchdog on rank 0 .*not ending the job", res.out)
    assert m, res.out[-3000:]
    print(f"\nshort partition ({down:.0f} s, stall_timeout_s={TIMEOUT_S:g}): job finished, longest step gap "
          f"{max(gaps):.1f} s; rank 0 busy {busy_s:g} s at step {busy_step}: {m.group(0)}")
    assert sorted(_seen(tmp_path / "seen", WORLD)) == list(range(SAMPLES))


def test_long_partition_ends_the_job_naming_the_rank(tmp_path: Path) -> None:
    res = _partition_job(tmp_path, 0.0, timeout=TIMEOUT_S + 90)
    assert res.returncode is not None, "the job hung after the partition:\n" + res.out[-3000:]
    assert res.returncode != 0 and "FINISHED" not in res.out
    m = re.search(rf"dynamix: stall watchdog on rank \d of {WORLD}: .*unreachable or frozen: rank {RANK} \(.*", res.out)
    assert m, res.out[-3000:]
    took = res.end_after_fault_s
    print(f"\nlong partition (stall_timeout_s={TIMEOUT_S:g}): job ended {took:.1f} s after the link went down; "
          f"{m.group(0)}")
    assert TIMEOUT_S <= took < TIMEOUT_S + END_SLACK_S, took
