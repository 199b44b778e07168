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


# ---- stall watchdog (dynamix_hvd/watchdog.py): frozen rank, busy rank, rank 0 lost ------------
STALL_S = 6.0            # stall_timeout_s of these jobs
END_SLACK_S = 8.0        # heartbeat period + launcher teardown + 2 cores shared with other work
GLOO_TEARDOWN_S = 10.0   # horovodrun --gloo: SIGTERM, 5 s grace, SIGKILL, 5 s more for the shell
                         # (horovod/runner/common/util/safe_shell_exec.py GRACEFUL_TERMINATION_TIME_S)


def _stall_env(timeout_s: float = STALL_S) -> dict[str, str]:
    from conftest import job_env

    return {**job_env(), "DYNAMIX_STALL_TIMEOUT_S": str(timeout_s)}


def _stall_cmd(launcher: str, np: int, *args: str) -> list[str]:
    from faultrun import STALL_JOB

    if launcher == "horovodrun":
        return ["horovodrun", "-np", str(np), sys.executable, STALL_JOB, *args]
    if launcher == "horovodrun-gloo":
        return ["horovodrun", "--gloo", "-np", str(np), "-H", f"localhost:{np}", sys.executable, STALL_JOB, *args]
    return [*MPIRUN, "-np", str(np), sys.executable, STALL_JOB, *args]


@pytest.mark.parametrize("launcher,np", [("mpirun", 4), ("horovodrun", 2), ("horovodrun-gloo", 2)])
def test_frozen_rank_ends_job_naming_it(have_mpirun, launcher, np):
    """SIGSTOP on one rank (a frozen node): the others wait in the gradient allreduce; the
    watchdog ends the job within stall_timeout_s + slack, naming the frozen rank."""
    from faultrun import run_job

    rank = np - 1
    res = run_job(_stall_cmd(launcher, np, "--fault", "sigstop", "--fault-rank", str(rank), "--fault-step", "20"),
                  _stall_env(), timeout=STALL_S + 90, cwd=str(REPO))
    assert res.returncode is not None, "the job hung after SIGSTOP:\n" + res.out[-3000:]
    assert res.returncode != 0 and "FINISHED" not in res.out
    assert re.search(rf"unreachable or frozen: rank {rank} \(", res.out), res.out[-3000:]
    took = res.end_after_fault_s
    print(f"\nfrozen rank {rank} of {np} ({launcher}, stall_timeout_s={STALL_S:g}): job ended {took:.1f} s after SIGSTOP")
    slack = END_SLACK_S + (GLOO_TEARDOWN_S if launcher == "horovodrun-gloo" else 0.0)
    assert STALL_S <= took < STALL_S + slack, took


@pytest.mark.parametrize("np", [1, 4])
def test_busy_rank_is_not_killed(have_mpirun, np):
    """Rank 0 alive but outside the training step for 2x stall_timeout_s (an evaluation, a slow
    checkpoint): its heartbeats go on, the job is not ended, rank 0 warns once (np > 1)."""
    from faultrun import run_job

    res = run_job(_stall_cmd("mpirun", np, "--fault", "busy", "--fault-rank", "0", "--fault-step", "20",
                             "--down-s", str(2 * STALL_S), "--samples", "1600"),
                  _stall_env(), timeout=180, cwd=str(REPO))
    assert res.returncode == 0, res.out[-3000:]
    assert res.out.count("FINISHED") == np
    gaps = [float(g) for g in re.findall(r"longest step gap ([0-9.]+) s", res.out)]
    assert min(gaps) >= 2 * STALL_S - 0.5, gaps
    if np > 1:
        m = re.search(r"dynamix: stall watchdog on rank 0 .*not ending the job", res.out)
        assert m, res.out[-3000:]
        print(f"\nrank 0 busy {2 * STALL_S:g} s (stall_timeout_s={STALL_S:g}, np {np}): job finished; {m.group(0)}")


def test_rank0_lost_then_resume_on_the_rest_exactly_once(have_mpirun, tmp_path):
    """SIGKILL of rank 0 (where the decisions are made) mid-epoch: the job ends; the last
    checkpoint resumes on the 3 remaining ranks and the epoch is trained exactly once."""
    from faultrun import run_job

    samples, ck = 3200, tmp_path / "ck.pt"
    common = ["--samples", str(samples), "--checkpoint", str(ck), "--checkpoint-every", "20"]
    first = run_job(_stall_cmd("mpirun", 4, "--fault", "sigkill", "--fault-rank", "0", "--fault-step", "50",
                               *common, "--seen-log", str(tmp_path / "run1")),
                    _stall_env(), timeout=STALL_S + 120, cwd=str(REPO))
    assert first.returncode is not None, "the job hung after rank 0 was killed:\n" + first.out[-3000:]
    assert first.returncode != 0 and "FINISHED" not in first.out and ck.exists()
    took = first.end_after_fault_s
    print(f"\nrank 0 of 4 SIGKILLed: job ended {took:.1f} s later")
    assert took < STALL_S + END_SLACK_S, took
    second = run_job(_stall_cmd("mpirun", 3, *common, "--allow-resize", "--seen-log", str(tmp_path / "run2")),
                     _stall_env(), timeout=240, cwd=str(REPO))
    assert second.returncode == 0, second.out[-3000:]
    m = re.search(r"RESUMED-AT (\d+) world 3", second.out)
    assert m, second.out[-3000:]
    resumed_at = int(m.group(1))
    assert resumed_at == 40

    def seen(prefix: str, world: int, before: int | None = None) -> list[int]:
        out = []
        for r in range(world):
            for line in (tmp_path / f"{prefix}.{r}").read_text().splitlines():
                step, idx = map(int, line.split())
                if before is None or step < before:
                    out.append(idx)
        return out

    assert sorted(seen("run1", 4, resumed_at) + seen("run2", 3)) == list(range(samples))


# ---- a node configured differently (config.rank_fingerprint, lifecycle.check_same_config) -------
RANK_ENV = str(REPO / "tests" / "launch" / "scripts" / "rank_env.sh")


@pytest.mark.parametrize("launcher", ["mpirun", "horovodrun-gloo"])
def test_a_rank_with_other_settings_ends_the_job_naming_them(have_mpirun, launcher):
    """Rank 1 alone gets DYNAMIX_DECISION_LAG=0 (its node's environment differs): before the check
    the ranks waited in different collectives for ever (the watchdog sees every rank alive at the
    same step and does not end it); now every rank refuses when Dynamix is built."""
    from faultrun import run_job

    cmd = _stall_cmd(launcher, 2, "--samples", "1600")
    at = cmd.index(sys.executable)
    cmd[at:at] = [RANK_ENV]
    t0 = time.time()
    res = run_job(cmd, {**_stall_env(), "RANK_ENV": "DYNAMIX_DECISION_LAG=0"}, timeout=120, cwd=str(REPO))
    assert res.returncode is not None, "the job hung:\n" + res.out[-3000:]
    assert res.returncode != 0 and "FINISHED" not in res.out
    for rank, value in ((0, 2), (1, 0)):
        assert (f"the configuration differs across ranks (compared with rank 0's): rank 1's decision_lag. Every rank must "
                f"have the same decision_lag (rank {rank}, this one, has decision_lag={value})") in res.out, res.out[-3000:]
    print(f"\n{launcher}: rank 1 with decision_lag 0: job ended {res.t_end - t0:.1f} s after launch")


@pytest.mark.parametrize("fault", ["skip", "break"])
@pytest.mark.parametrize("controller", ["static", "goodput"])
def test_a_rank_that_leaves_a_step_out_ends_the_job_naming_it(have_mpirun, controller, fault):
    """Rank 1 takes the batch of step 7 and goes on to the next one without optimizer.step() (a
    ``continue`` on a loss that is not finite, say). Before the check, the static job trained every
    later step a step out of line with the other rank and failed at its end ("Horovod has been shut
    down", after the whole job); the goodput job hung (the watchdog sees every rank alive). Now rank 1
    raises StepSkippedError as it takes the next batch, and the job ends. ``break``: rank 1 alone
    leaves epoch 0 after step 50 and begins epoch 1 (a time budget counted per rank, say); before,
    both jobs hung (killed after 90 s); now every rank raises StepSkippedError in the step that
    begins the epoch on rank 1 only."""
    from conftest import job_env
    from faultrun import run_job

    how = ["--skip-at-step", "7"] if fault == "skip" else ["--break-at-step", "50"]
    cmd = [*MPIRUN, "-np", "2", sys.executable, str(REPO / "tests" / "launch" / "scripts" / "hook_job.py"),
           *how, "--epochs", "2", "--controller", controller]
    res = run_job(cmd, job_env(), timeout=120, cwd=str(REPO))
    assert res.returncode is not None, "the job hung:\n" + res.out[-3000:]
    assert res.returncode != 0 and "final test accuracy" not in res.out
    if fault == "skip":
        assert ("dynamix: rank 1 of 2 failed with StepSkippedError: dynamix: rank 1 of 2 took its next batch without "
                "calling optimizer.step() for the batch of step 7") in res.out, res.out[-3000:]
    else:
        assert ("failed with StepSkippedError: dynamix: rank(s) [1] began an epoch at step 51 while rank(s) [0] are "
                "in the middle of one") in res.out, res.out[-3000:]
    m = re.search(r"FAULT-AT ([0-9.]+)", res.out)
    assert m, res.out[-3000:]
    elapsed = res.t_end - float(m.group(1))
    assert elapsed < 30, f"job took {elapsed:.1f}s to end after the fault"
    print(f"\n{controller}, {fault}: job ended {elapsed:.1f} s after the fault")
