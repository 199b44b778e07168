"""A disk that fills while a checkpoint is written (issue 23), under real mpirun with 2 ranks.

The checkpoint goes to a 1 MiB tmpfs; after the checkpoint of step 20 rank 0 fills that file
system to the last byte. Then:

* the previous checkpoint stays intact and loadable (atomic write: temporary file, fsync,
  rename), and no temporary file is left behind;
* the error names the path, the checkpoint's size and the errno text (ENOSPC);
* ``checkpoint_on_error='continue'``: training goes on, rank 0 warns and logs a
  ``checkpoint_error`` event, and the checkpoint after the disk is freed is written;
* ``checkpoint_on_error='stop'``: every rank raises ``CheckpointWriteError`` (each says so
  itself: the outcome is broadcast, no rank waits for a checkpoint that never comes) and the job
  ends within 30 s.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import MPIRUN, REPO, run

SCRIPT = str(REPO / "tests" / "launch" / "scripts" / "disk_full_job.py")


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (root needed); skipped with the reason when it cannot be mounted."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (this test fills a small file system)")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def _job(disk: Path, run_dir: Path, on_error: str, free_at: int = -1) -> subprocess.CompletedProcess:
    cmd = [*MPIRUN, "-np", "2", sys.executable, SCRIPT, "--checkpoint", str(disk / "ck.pt"), "--every", "10",
           "--fill-at", "20", "--free-at", str(free_at), "--steps", "60", "--on-error", on_error,
           "--run-dir", str(run_dir), "--report", str(run_dir.parent / "saves.jsonl")]
    return run(cmd, check=False, timeout=240)


def _on_disk_step(path: Path) -> int:
    from dynamix_hvd import checkpoint as ckpt
    return int(ckpt.load(path)["dynamix"]["sampler"]["step"])


ERROR = re.compile(r"checkpoint (\S+) not written: ENOSPC \(No space left on device\) while writing (\d+) bytes")


def test_full_disk_continue_keeps_the_previous_checkpoint_and_trains_on(have_mpirun, small_disk, tmp_path):
    proc = _job(small_disk, tmp_path / "run", "continue", free_at=45)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "FINISHED rank 0" in out and "FINISHED rank 1" in out
    saves = {r["step"]: (r["written"], r["on_disk_step"])
             for r in map(json.loads, (tmp_path / "saves.jsonl").read_text().splitlines())}
    # 30 and 40 fail on the full disk, and the checkpoint on disk is still step 20's, loadable
    assert saves == {10: (True, 10), 20: (True, 20), 30: (False, 20), 40: (False, 20), 50: (True, 50),
                     60: (True, 60)}, out[-3000:]
    assert "training goes on (checkpoint_on_error='continue')" in out and ERROR.search(out)   # rank 0's warning
    events = [json.loads(ln) for ln in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    logged = [e for e in events if "checkpoint_error" in e]
    assert [e["step"] for e in logged] == [30, 40]
    for e in logged:
        m = ERROR.match(e["checkpoint_error"]["error"])
        assert m and m.group(1) == str(small_disk / "ck.pt") and int(m.group(2)) > 50_000, e
        assert e["checkpoint_error"]["error"].endswith("the previous checkpoint there is unchanged")
    assert _on_disk_step(small_disk / "ck.pt") == 60
    assert sorted(p.name for p in small_disk.iterdir()) == ["ck.pt"]        # no temporary file left


def test_full_disk_stop_ends_every_rank_cleanly(have_mpirun, small_disk, tmp_path):
    proc = _job(small_disk, tmp_path / "run", "stop")
    t_end = time.time()
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    assert "FINISHED" not in out
    # every rank raised the error itself (the outcome is broadcast: none waits for the checkpoint)
    for r in (0, 1):
        assert re.search(rf"rank {r} of 2 failed with CheckpointWriteError: checkpoint \S+ not written: "
                         r"ENOSPC \(No space left on device\) while writing \d+ bytes", out), out[-4000:]
    t_fail = max(float(m.group(1)) for m in re.finditer(r"SAVING rank=\d step=30 at=([0-9.]+)", out))
    print(f"\nfull disk, checkpoint_on_error='stop': job ended {t_end - t_fail:.1f} s after the failing save began")
    assert t_end - t_fail < 30, f"job took {t_end - t_fail:.1f}s to end after the failed checkpoint"
    assert _on_disk_step(small_disk / "ck.pt") == 20                         # the previous one, intact
    assert sorted(p.name for p in small_disk.iterdir()) == ["ck.pt", "filler.bin"]
