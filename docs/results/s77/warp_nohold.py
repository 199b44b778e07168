"""Session 77: goodput with and without the noise-scale hold in worlds of flatter batch warps (warp_nohold.txt)."""
import sys, math, numpy as np
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / 'benchmarks'))
from goodput_gap import _patched_observe
from dynamix_hvd.replay.worlds import WorldSpec, Perturbation, build_sim
from dynamix_hvd.replay.runner import run_controller
def med(wl, n, warp, shift, mode, seeds=range(5, 11), sig=1.0):
    ts = []
    for s in seeds:
        sim = build_sim(WorldSpec(wl, n, 'none', s, Perturbation(batch_warp=warp, gns_shift=shift, gns_sigma_mult=sig)))
        if mode == 'nohold':
            sim.observe = _patched_observe(sim, 'nohold')
        r = run_controller(sim, 'goodput', s)
        ts.append(r['time_to_target_s'] or math.inf)
    return float(np.median(ts))
SETS = {'warp': [((0, 0), 0.0, 1.0), ((-0.3, 0), 0.9, 1.0), ((-0.45, 0), 1.35, 1.0), ((-0.45, 0), 3.0, 1.0)],
        'sigma': [((0, 0), 0.0, 4.0), ((0, 0), 0.0, 10.0), ((-0.45, 0), 1.35, 4.0), ((-0.45, 0), 1.35, 10.0)]}
for wl in sys.argv[1].split(','):
    for warp, shift, sig in SETS[sys.argv[2] if len(sys.argv) > 2 else 'warp']:
        for n in (8, 32):
            g = med(wl, n, warp, shift, 'goodput', sig=sig); h = med(wl, n, warp, shift, 'nohold', sig=sig)
            print(f'{wl:12s} warp {warp} shift {shift}' + (f' sigma x{sig:g}' if sig != 1 else '')
                  + f' N={n}: goodput {g:8.0f} nohold/goodput {h/g:.3f}', flush=True)
