"""Session 77, an experiment (not product code): the shipped recipe with the expert's labels tilted toward the pass
action (goodput's own batch with the noise-scale hold passed) by PASS_TIE in regret, so that where passing the hold
costs less than that on a training world the policy is taught to pass. Without ncf in training the pass is nearly a
tie with the no-op on the other three workloads (goodput without the hold: 0.97-1.00x on them, 0.85x on ncf), so the
no-op's own bonus labels those states no-op; the question is whether a learner taught to pass where it is free passes
on the left-out ncf.

    .venv/bin/python docs/results/s77/pass_tie.py TILT OUT WORKLOADS [extra train-policy flags]

TILT as a number (the first two rounds, 0.01 and 0.003): the pass's regret lowered by TILT wherever the labels are made
(imitate.noop_label, called by the lookahead and one-interval labels; in this recipe the fit does not re-label), so the
pass is labelled in every tie with the no-op. TILT with a "b" suffix (0.01b, the third round): only where the hold
binds (the pass's regret is not the no-op's) and the pass is already the best departure (no fixed scale other than the
no-op has less regret), so ties stay the no-op's and a fixed growth that beats the pass keeps its label.
"""
import sys

import numpy as np

import dynamix_hvd.agent.imitate as imitate
from dynamix_hvd.cli import main

BOUND = sys.argv[1].endswith("b")
PASS_TIE = float(sys.argv[1].rstrip("b"))
_orig = imitate.noop_label


def noop_label(regret, noop, bonus, pass_index=None):
    label, reg = _orig(regret, noop, bonus, pass_index)
    if pass_index is None or PASS_TIE <= 0:
        return label, reg
    if BOUND:
        raw = np.asarray(regret, dtype=np.float64)
        others = [j for j in range(raw.size) if j not in (noop, pass_index)]
        binds = abs(raw[pass_index] - raw[noop]) > 1e-12
        best_departure = raw[pass_index] <= min(raw[j] for j in others) + 1e-12
        if not (binds and best_departure):
            return label, reg
    reg = np.array(reg, dtype=np.float64)
    reg[pass_index] -= PASS_TIE
    reg = np.maximum(reg - reg.min(), 0.0)
    low = np.flatnonzero(reg <= reg.min() + 1e-12)
    return (pass_index if pass_index in low else int(low[np.argmin(np.abs(low - noop))])), reg


imitate.noop_label = noop_label
out, workloads = sys.argv[2], sys.argv[3]
RECIPE = ("--world replay --method imitate --dagger-iters 3 --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 "
          "--pass-hold --balance worlds --history 0 --pass-action --pass-only --disable system,network --enable mem_use "
          "--seed 0").split()
sys.exit(main(["train-policy", *RECIPE, "--workloads", workloads, *sys.argv[4:], "--out", out]))
