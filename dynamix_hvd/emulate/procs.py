"""Stopping the launcher processes of a bench run (mpirun, torchrun nodes)."""
from __future__ import annotations

import os
import signal
import subprocess


def kill_group(p: subprocess.Popen) -> None:
    """SIGTERM the process group ``p`` leads (SIGKILL after 5 s), then reap ``p``. Also when ``p``
    itself has exited: ranks it started may still be alive in its group."""
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=5)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
