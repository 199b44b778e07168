"""Session 77: one replay episode per controller, its global batch per decision and the policy outcome / noise-scale estimate (value, stable, rel. err, room) of the first 40.
    .venv/bin/python docs/results/s77/schedule.py ncf none 32 5 goodput ppo:dynamix_hvd/agent/policies/default.zip ppo:runs/s74/loo_ncf_mu0_box.zip"""
import sys, numpy as np
from dynamix_hvd.replay.runner import make_world, run_controller, build_controller
wl, tr, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
w = make_world(wl, tr, n)
for name in sys.argv[5:]:
    sim = w.sim
    sim.reset(seed)
    ctl = build_controller(name, sim, seed)
    outs = []
    orig = ctl.decide
    def dec(state, orig=orig):
        r = orig(state)
        g = state.glob
        outs.append((getattr(ctl, 'last_outcome', None) or getattr(ctl,'outcome',None), round(float(g.noise_scale)), bool(g.noise_scale_stable), round(float(g.noise_scale_rel_err),2), round(float(g.noise_scale_room))))
        return r
    ctl.decide = dec
    r = run_controller(sim, name, seed, controller=ctl)
    Bs = r['schedule']
    print(name[:40], 'T=%.1f' % r['time_to_target_s'], 'decisions', len(Bs))
    print('  B:', ' '.join(str(int(b)) for b in Bs[:60]))
    print('  o:', outs[:40])
