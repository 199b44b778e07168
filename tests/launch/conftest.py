"""Launcher tests start real jobs with mpirun / horovodrun as subprocesses."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def job_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONUNBUFFERED="1",
               # decisions every interval_steps exactly (the jobs' steps take ~1 ms: by default the
               # interval would stretch to min_decision_s and short test jobs would see none)
               DYNAMIX_MIN_DECISION_S="0")
    return env


def torchrun(nproc: int, *args: str, restarts: int = 0, timeout: float = 300, check: bool = True,
             script: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``torchrun --standalone`` of ``script`` with ``args`` on ``nproc`` ranks (the jobs' env)."""
    e = job_env()
    # torch 2.13 shares the rendezvous TCP store with the workers: after a restart gloo reads the
    # previous attempt's addresses (pytorch/pytorch#135712); a store per attempt avoids it
    e["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    e.update(env or {})
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(nproc), "--max-restarts", str(restarts),
           script, *args]
    proc = subprocess.run(cmd, cwd=REPO, env=e, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def default_sigint() -> None:
    """``preexec_fn`` for children a test interrupts: they take SIGINT as Ctrl-C even when the
    suite runs as a background job (a shell without job control starts `cmd &` with SIGINT
    ignored, and Python then keeps ignoring it in its children)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,tcp",
          "--mca", "btl_tcp_if_include", "lo"]


def run(cmd: list[str], timeout: float = 300, check: bool = True, cwd: Path = REPO) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=job_env(), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


@pytest.fixture(scope="session")
def have_mpirun() -> None:
    if shutil.which("mpirun", path=job_env()["PATH"]) is None:
        pytest.fail("mpirun not found: run scripts/setup_env.sh")
