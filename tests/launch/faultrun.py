"""Running a job that may hang (a fault test whose handling was removed) without leaving its
processes behind: a timeout kills the launcher and every process it started (stopped ones too)."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

STALL_JOB = str(Path(__file__).resolve().parent / "scripts" / "stall_job.py")


@dataclass
class JobResult:
    returncode: int | None     # None: timed out (the job hung and was killed)
    out: str                   # stdout + stderr
    t_end: float               # unix time the launcher exited (or was killed)

    @property
    def fault_at(self) -> float:
        m = re.search(r"FAULT-AT ([0-9.]+)", self.out)
        assert m, self.out[-3000:]
        return float(m.group(1))

    @property
    def end_after_fault_s(self) -> float:
        return self.t_end - self.fault_at


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(pid: int) -> None:
    for p in [pid, *_descendants(pid)]:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass


def run_job(cmd: list[str], env: dict[str, str], timeout: float, cwd: str | None = None) -> JobResult:
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return JobResult(proc.returncode, out, time.time())
    except subprocess.TimeoutExpired:
        t_end = time.time()
        kill_tree(proc.pid)
        out, _ = proc.communicate(timeout=30)
        return JobResult(None, out, t_end)
