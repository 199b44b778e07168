"""A trained policy *sampled* (``PPOController(deterministic=False)``) against goodput in the replay.

    PYTHONPATH=. .venv/bin/python benchmarks/probe_stochastic.py ppo:POLICY.zip WORKLOADS TRACES

Per cell (N = 8 and 32, seeds 5-9): the per-seed ratio of the sampled policy's time to target to
goodput's and their median. Session 26: the policies trained in the replay take goodput's choice
in every evaluated state when deterministic (argmax = the no-op, probability 0.38-0.54); their
training curves (0.97-0.98x goodput) were the sampled policy's. This tells whether sampling is
what gained (docs/results/s26/stochastic_probe.txt: no, 1.07x on bert and deepspeech2).
"""
import sys, numpy as np
from dynamix_hvd.replay.runner import make_world, run_controller, build_controller
import dynamix_hvd.replay.runner as R
from dynamix_hvd.controllers.ppo import PPOController
pol = sys.argv[1]; wls = sys.argv[2].split(','); trs = sys.argv[3].split(',')
orig = PPOController.__init__
def init(self, *a, **k):
    k['deterministic'] = False
    orig(self, *a, **k)
PPOController.__init__ = init
out = []
for wl in wls:
    for tr in trs:
        for n in (8, 32):
            sim = make_world(wl, tr, n).sim
            rs = []
            for s in range(5, 10):
                g = run_controller(sim, 'goodput', s)['time_to_target_s']
                p = run_controller(sim, pol, s)['time_to_target_s']
                rs.append(p / g)
            out.append(np.median(rs))
            print(wl, tr, n, 'stochastic/goodput median %.3f' % np.median(rs), [round(x, 3) for x in rs], flush=True)
print('geomean', np.exp(np.mean(np.log(out))))
