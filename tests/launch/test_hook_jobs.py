"""The user-facing example under horovodrun (3 lines from the plain Horovod script), and
kill-and-resume exact-once with the same loop (tests/launch/scripts/hook_job.py)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import MPIRUN, REPO, run, torchrun
from dynamix_hvd.runlog import EventRecord, read_decisions, read_events

EXAMPLE = str(REPO / "examples" / "mnist1d_horovod.py")
PLAIN = REPO / "examples" / "mnist1d_plain.py"
JOB = str(REPO / "tests" / "launch" / "scripts" / "hook_job.py")


def test_example_is_three_lines_from_plain_horovod():
    import difflib

    a, b = PLAIN.read_text().splitlines(), Path(EXAMPLE).read_text().splitlines()
    changed = [ln for ln in difflib.unified_diff(a, b, lineterm="", n=0)
               if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert 0 < len([ln for ln in changed if ln.startswith("+")]) <= 3, changed
    assert len([ln for ln in changed if ln.startswith("-")]) <= 3, changed
    assert any("loss.backward()" in ln for ln in b) and any("optimizer.step()" in ln for ln in b)


def test_horovodrun_smoke(have_mpirun, tmp_path, monkeypatch):
    monkeypatch.setenv("DYNAMIX_RUN_DIR", str(tmp_path))      # settings reach the example through the env
    monkeypatch.setenv("DYNAMIX_CONTROLLER", "static")
    proc = run(["horovodrun", "-np", "2", sys.executable, EXAMPLE, "--epochs", "2", "--samples", "2000"])
    m = re.search(r"final test accuracy ([0-9.]+)", proc.stdout)
    assert m, proc.stdout[-2000:]
    assert float(m.group(1)) > 0.2          # 10 classes: well above chance after 2 epochs
    assert (tmp_path / "events.jsonl").stat().st_size > 0


def _seen(prefix: Path, world: int, before_step: int | None = None) -> list[int]:
    out = []
    for r in range(world):
        f = Path(f"{prefix}.{r}")
        if not f.exists():
            continue
        for line in f.read_text().splitlines():
            step, idx = map(int, line.split())
            if before_step is None or step < before_step:
                out.append(idx)
    return out


def test_kill_mid_epoch_and_resume_exactly_once(have_mpirun, tmp_path):
    world, samples = 2, 2500  # 2000 training samples
    ck = tmp_path / "ck.pt"
    common = ["--epochs", "1", "--samples", str(samples), "--base-batch", "8", "--controller", "proportional",
              "--checkpoint", str(ck), "--checkpoint-every", "20"]
    first = run([*MPIRUN, "-np", str(world), sys.executable, "-m", "mpi4py", JOB, *common,
                 "--seen-log", str(tmp_path / "run1"), "--die-at-step", "55"], check=False, timeout=240)
    assert first.returncode != 0, "rank 1 was SIGKILLed: the job must end with an error, not succeed"
    assert ck.exists()
    import torch
    resumed_at = torch.load(ck, weights_only=True)["dynamix"]["sampler"]["step"]
    assert resumed_at == 40
    run([*MPIRUN, "-np", str(world), sys.executable, "-m", "mpi4py", JOB, *common,
         "--seen-log", str(tmp_path / "run2")], timeout=240)
    before = _seen(tmp_path / "run1", world, before_step=resumed_at)
    after = _seen(tmp_path / "run2", world)
    assert sorted(before + after) == list(range(int(samples * 0.8)))


def test_resume_on_fewer_workers_exactly_once(have_mpirun, tmp_path):
    """A worker leaves: the 3-rank job dies, its checkpoint resumes on 2 ranks with the
    global batch re-split; every index of the epoch is still trained exactly once."""
    samples = 2500
    ck = tmp_path / "ck.pt"
    common = ["--epochs", "1", "--samples", str(samples), "--base-batch", "8", "--controller", "static",
              "--checkpoint", str(ck), "--checkpoint-every", "20"]
    first = run([*MPIRUN, "-np", "3", sys.executable, "-m", "mpi4py", JOB, *common,
                 "--seen-log", str(tmp_path / "run1"), "--die-at-step", "30"], check=False, timeout=240)
    assert first.returncode != 0
    run([*MPIRUN, "-np", "2", sys.executable, "-m", "mpi4py", JOB, *common, "--allow-resize",
         "--seen-log", str(tmp_path / "run2")], timeout=240)
    before = _seen(tmp_path / "run1", 3, before_step=20)
    after = _seen(tmp_path / "run2", 2)
    assert sorted(before + after) == list(range(int(samples * 0.8)))
    sizes = {len([l for l in Path(f"{tmp_path / 'run2'}.{r}").read_text().splitlines()]) for r in range(2)}
    assert all(s > 0 for s in sizes)


def test_gloo_controller_uses_horovod_collectives(have_mpirun, tmp_path, monkeypatch):
    """Under horovodrun --gloo (no MPI underneath) plans travel over Horovod's own ops."""
    monkeypatch.setenv("DYNAMIX_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("DYNAMIX_CONTROLLER", "proportional")
    proc = run(["horovodrun", "--gloo", "-np", "2", "-H", "localhost:2", sys.executable, EXAMPLE, "--epochs", "1",
                "--samples", "2000"])
    assert "final test accuracy" in proc.stdout
    decisions = read_decisions(tmp_path)      # schema-checked
    assert len(decisions) >= 2   # 25 steps, a decision every 10 (mpi4py here would see a world of 1 and fail)
    assert all(len(d.workers) == 2 for d in decisions)


SLOW_ROOT = str(REPO / "tests" / "launch" / "scripts" / "slow_root_exit.py")


def _ended_cleanly_with_a_decision_in_flight(proc: subprocess.CompletedProcess, tmp_path: Path) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for r in (0, 1):      # the case this is about: the script ends with the last decision still travelling
        assert f"rank {r}: 8 steps, a decision in flight: True" in proc.stdout, proc.stdout[-2000:]
    dropped = [e for e in read_events(tmp_path) if isinstance(e, EventRecord) and e.kind == "decision_dropped"]
    assert [e.detail["reason"] for e in dropped] == ["closed"]


def test_a_job_ends_cleanly_when_rank_0_sends_the_last_row_late_gloo(have_mpirun, tmp_path, monkeypatch):
    """A fast rank leaving with the last decision in flight shut Horovod down under the slower
    rank 0 ("Horovod has been shut down"; CI of session 69): at exit every rank now waits."""
    monkeypatch.setenv("DYNAMIX_RUN_DIR", str(tmp_path))
    proc = run(["horovodrun", "--gloo", "-np", "2", "-H", "localhost:2", sys.executable, SLOW_ROOT], check=False,
               timeout=180)
    _ended_cleanly_with_a_decision_in_flight(proc, tmp_path)


def test_a_job_ends_cleanly_when_rank_0_sends_the_last_row_late_mpi(have_mpirun, tmp_path, monkeypatch):
    """The same under mpirun (the mpi4py transport): MPI was finalised under rank 0 mid-step."""
    monkeypatch.setenv("DYNAMIX_RUN_DIR", str(tmp_path))
    proc = run([*MPIRUN, "-np", "2", "-x", "DYNAMIX_RUN_DIR", sys.executable, "-m", "mpi4py", SLOW_ROOT], check=False,
               timeout=180)
    _ended_cleanly_with_a_decision_in_flight(proc, tmp_path)


def test_a_job_ends_cleanly_when_rank_0_sends_the_last_row_late_ddp(tmp_path, monkeypatch):
    """The same for the DDP engine under torchrun (gloo)."""
    monkeypatch.setenv("DYNAMIX_RUN_DIR", str(tmp_path))
    proc = torchrun(2, "--engine", "ddp", script=SLOW_ROOT, timeout=180, check=False)
    _ended_cleanly_with_a_decision_in_flight(proc, tmp_path)
