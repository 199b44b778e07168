"""lifecycle.StopOnSignal alone (real signals to this process): the first SIGTERM / SIGUSR1 is
kept as a flag, a second of the same kind takes the default action at once, a handler of the
user's own is never replaced, restore() puts the default back. Across ranks:
tests/mpi/test_stop_signal.py, tests/launch/test_stop_signal.py."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from dynamix_hvd.lifecycle import StopOnSignal


def test_the_first_signal_is_a_flag_and_restore_puts_the_default_back() -> None:
    stop = StopOnSignal(True)
    try:
        assert sorted(stop.installed) == sorted([signal.SIGTERM, signal.SIGUSR1]) and stop.get() == 0
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.get() == signal.SIGUSR1
        os.kill(os.getpid(), signal.SIGTERM)        # another kind: the first one is kept, nothing ends
        assert stop.get() == signal.SIGUSR1
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL == signal.getsignal(signal.SIGUSR1)
    assert StopOnSignal(False).installed == []


def test_a_handler_of_ones_own_is_kept() -> None:
    def mine(s: int, f: object) -> None:
        pass

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        stop = StopOnSignal(True)
        assert stop.installed == [signal.SIGUSR1] and signal.getsignal(signal.SIGTERM) is mine
        stop.restore()
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_second_signal_of_the_same_kind_ends_the_process_at_once() -> None:
    code = textwrap.dedent("""
        import os, signal, time
        from dynamix_hvd.lifecycle import StopOnSignal
        stop = StopOnSignal(True)
        os.kill(os.getpid(), signal.SIGTERM)
        print("flag", stop.get(), flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        print("still alive", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["flag", str(int(signal.SIGTERM))], proc.stdout + proc.stderr
    assert proc.returncode == -signal.SIGTERM
