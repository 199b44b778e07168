"""Preemption: the launcher is told to stop the job (SIGUSR1 to mpirun, which forwards it to every
rank; SIGTERM to torchrun, which forwards it and waits 30 s before SIGKILL). Every rank stops
after the same step with a checkpoint in run_dir and exits 75 (``stop_on_signal``), and the job
run again resumes from it: every index of the epoch exactly once over both runs. With
``DYNAMIX_STOP_ON_SIGNAL=0`` the same signal kills the ranks and nothing is saved.
Jobs: tests/launch/scripts/hook_job.py (Horovod), ddp_job.py (DDP)."""
from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import BIN, MPIRUN, REPO, job_env

HOOK_JOB = str(REPO / "tests" / "launch" / "scripts" / "hook_job.py")
DDP_JOB = str(REPO / "tests" / "launch" / "scripts" / "ddp_job.py")


def _steps_logged(prefix: Path) -> int:
    f = Path(f"{prefix}.0")
    return len(f.read_text().splitlines()) if f.exists() else 0


def _signal_mid_run(cmd: list[str], env: dict[str, str], seen: Path, sig: int) -> tuple[subprocess.CompletedProcess, float]:
    """Start ``cmd``; once rank 0 has logged 200 samples, send ``sig`` to the launcher; return
    the finished process and the seconds from the signal to its end."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t_limit = time.time() + 120
    while _steps_logged(seen) < 200 and proc.poll() is None and time.time() < t_limit:
        time.sleep(0.05)
    assert proc.poll() is None, "the job ended before the signal:\n" + proc.communicate()[1][-3000:]
    t_sig = time.time()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), time.time() - t_sig


def _lines(prefix: Path, world: int) -> list[list[int]]:
    return [list(map(int, ln.split())) for r in range(world) if Path(f"{prefix}.{r}").exists()
            for ln in Path(f"{prefix}.{r}").read_text().splitlines()]


def _jobs(engine: str, tmp_path: Path, seen: Path) -> tuple[list[str], dict[str, str], int, int]:
    ck = tmp_path / "checkpoint.pt"
    env = {**job_env(), "DYNAMIX_RUN_DIR": str(tmp_path), "DYNAMIX_TENSORBOARD": "0"}
    if engine == "horovod":
        cmd = [*MPIRUN, "-np", "2", sys.executable, "-m", "mpi4py", HOOK_JOB, "--samples", "2500",
               "--controller", "proportional", "--checkpoint", str(ck), "--sleep", "0.02", "--seen-log", str(seen)]
        return cmd, env, signal.SIGUSR1, 2000
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", DDP_JOB, "--mode", "train",
           "--samples", "2000", "--controller", "proportional", "--checkpoint", str(ck), "--resume",
           "--sleep", "0.02", "--seen-log", str(seen)]
    return cmd, env, signal.SIGTERM, 2000


@pytest.mark.parametrize("engine", ["horovod", "ddp"])
def test_a_stopped_job_checkpoints_and_resumes_exactly_once(have_mpirun, tmp_path, engine):
    seen1, seen2 = tmp_path / "run1", tmp_path / "run2"
    cmd, env, sig, n = _jobs(engine, tmp_path, seen1)
    first, took = _signal_mid_run(cmd, env, seen1, sig)
    out = first.stdout + first.stderr
    assert first.returncode != 0 and "final test accuracy" not in out and "FINISHED" not in out, out[-3000:]
    m = re.search(r"dynamix: rank 0 stops after step (\d+): (.*?); checkpoint (\S+) ", out)
    assert m, out[-3000:]
    stopped = int(m.group(1))
    assert m.group(3) == str(tmp_path / "checkpoint.pt") and (tmp_path / "checkpoint.pt").exists()
    if engine == "horovod":
        assert first.returncode == 75, first.returncode        # mpirun passes the ranks' exit code on
    assert took < 20, took                                      # (torchrun would SIGKILL after 30 s)
    print(f"\n{engine}: {signal.Signals(sig).name} to the launcher: stopped after step {stopped}, "
          f"ended {took:.1f} s after the signal")

    cmd2, env2, _, _ = _jobs(engine, tmp_path, seen2)
    again = subprocess.run(cmd2, cwd=REPO, env=env2, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    step_col = 0 if engine == "horovod" else 1
    before = [ln[-1] for ln in _lines(seen1, 2) if ln[step_col] < stopped]
    after = [ln[-1] for ln in _lines(seen2, 2)]
    assert min(ln[step_col] for ln in _lines(seen2, 2)) == stopped     # resumed where it stopped
    assert sorted(before + after) == list(range(n))


def test_without_it_the_signal_kills_the_job_and_nothing_is_saved(have_mpirun, tmp_path):
    seen = tmp_path / "run1"
    cmd, env, sig, _ = _jobs("horovod", tmp_path, seen)
    first, _ = _signal_mid_run(cmd, {**env, "DYNAMIX_STOP_ON_SIGNAL": "0"}, seen, sig)
    assert first.returncode != 0 and "stops after step" not in first.stderr
    assert not (tmp_path / "checkpoint.pt").exists()
