"""One failing rank ends the whole job quickly (no hang), with the rank and error printed."""
from __future__ import annotations

import re
import sys
import time

import pytest

from conftest import MPIRUN, REPO, run

SCRIPT = str(REPO / "tests" / "launch" / "scripts" / "fault_job.py")


def _ended_within(proc, t_end: float, limit: float = 30.0) -> float:
    m = re.search(r"FAULT-AT ([0-9.]+)", proc.stdout + proc.stderr)
    assert m, (proc.stdout[-2000:], proc.stderr[-2000:])
    elapsed = t_end - float(m.group(1))
    assert elapsed < limit, f"job took {elapsed:.1f}s to end after the fault"
    return elapsed


@pytest.mark.parametrize("launcher", ["mpirun", "mpirun-mpi4py", "horovodrun"])
def test_exception_on_one_rank_ends_job(have_mpirun, launcher):
    if launcher == "horovodrun":
        cmd = ["horovodrun", "-np", "2", sys.executable, SCRIPT, "--mode", "raise"]
    elif launcher == "mpirun":
        cmd = [*MPIRUN, "-np", "2", sys.executable, SCRIPT, "--mode", "raise"]
    else:
        cmd = [*MPIRUN, "-np", "2", sys.executable, "-m", "mpi4py", SCRIPT, "--mode", "raise"]
    proc = run(cmd, check=False, timeout=180)
    t_end = time.time()
    assert proc.returncode != 0
    assert "FINISHED" not in proc.stdout
    assert "injected failure in the training loop" in proc.stderr + proc.stdout
    if launcher == "mpirun":
        assert "dynamix: rank 1 of 2 failed with RuntimeError" in proc.stderr
    _ended_within(proc, t_end)


def test_sigkill_of_one_rank_ends_job(have_mpirun):
    proc = run([*MPIRUN, "-np", "2", sys.executable, SCRIPT, "--mode", "sigkill"], check=False, timeout=180)
    t_end = time.time()
    assert proc.returncode != 0
    assert "FINISHED" not in proc.stdout
    _ended_within(proc, t_end)
