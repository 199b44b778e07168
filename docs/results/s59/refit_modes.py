"""Counts over the refits of one aggregate (session 59): each refit's validation geomean and whether it ever departs on
cifar10 and deepspeech2 (both at goodput's time within 0.5%), read from the validation outputs of run.sh.

    python docs/results/s59/refit_modes.py docs/results/s59/refits_same_aggregate.txt docs/results/s59/refits20.txt
"""
import re
import sys

geo, per = {}, {}
for path in sys.argv[1:]:
    for line in open(path):
        m = re.match(r"[ *]+(\S+): geomean ([0-9.]+),", line)
        if m:
            geo[m.group(1)] = float(m.group(2))
        m = re.match(r"(\S+): geomean B/A per workload: (.*)", line)
        if m:
            per[m.group(1)] = {w: float(v) for w, v in re.findall(r"(\S+) ([0-9.]+)", m.group(2))}
for kind in ("rfsoft", "rfrg"):
    runs = sorted((p for p in per if f"/{kind}_s" in p), key=lambda p: int(re.search(r"_s(\d+)_", p).group(1)))
    g = [geo[p] for p in runs]
    off = [p for p in runs if per[p]["cifar10"] >= 0.995 and per[p]["deepspeech2"] >= 0.995]
    print(f"{kind}: {len(runs)} refits, validation geomean {min(g):.3f}-{max(g):.3f} (mean {sum(g) / len(g):.3f}), "
          f"<= 0.955: {sum(x <= 0.955 for x in g)}; never depart on cifar10 and deepspeech2: {len(off)} "
          f"(their mean {sum(geo[p] for p in off) / max(1, len(off)):.3f}; the others' "
          f"{sum(geo[p] for p in runs if p not in off) / max(1, len(runs) - len(off)):.3f})")
    for p in runs:
        print(f"  {p}: {geo[p]:.3f}  " + "  ".join(f"{w} {v:.3f}" for w, v in per[p].items()))
