"""grad_mb on the ddp engine under real torchrun (2 ranks, gloo): the payload is reduced with the
model's gradients and the model's gradient stays one big batch's (tests/launch/scripts/ddp_payload_job.py)."""
from __future__ import annotations

import re

from test_ddp import REPO, torchrun

JOB = str(REPO / "tests" / "launch" / "scripts" / "ddp_payload_job.py")


def test_payload_reduced_and_real_gradient_exact_under_torchrun():
    proc = torchrun(2, script=JOB)
    m = re.search(r"PAYLOAD real (\S+) payload (\S+) steps (\d+) plans (\d+) bytes (\d+)", proc.stdout)
    assert m, proc.stdout[-2000:] + proc.stderr[-2000:]
    real, payload, steps, plans, nbytes = float(m[1]), float(m[2]), int(m[3]), int(m[4]), int(m[5])
    assert real <= 1e-6 and payload <= 1e-5, m[0]
    assert steps >= 6 and plans >= 3 and nbytes == 500_000, m[0]
