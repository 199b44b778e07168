"""Session 58: each DAgger-iteration variant of the default's recipe against the three-iteration draw of the same seed,
on the validation seeds 1000-1009 (episodes from runs/s58/select_cache.json, as select-policy ran them): geometric mean
over the 24 shipped cells of median(variant) / median(goodput), and the 90% paired interval of variant / three-iteration
draw (``select_draw.paired_interval``). Usage: iters_paired.py [CACHE]"""
import sys

from dynamix_hvd.agent.replay_eval import episode_key, policy_tag, read_cache
from dynamix_hvd.agent.select_draw import paired_interval, rank_draws

cache = read_cache(sys.argv[1] if len(sys.argv) > 1 else "runs/s58/select_cache.json")
cells = [(w, t, n) for w in ("bert", "cifar10", "deepspeech2", "ncf")
         for t in ("none", "job_3_norm", "cov:coefficient_variation") for n in (8, 32)]
seeds = range(1000, 1010)


def per_cell(tag):
    return {c: [cache[episode_key(*c, s, tag)] for s in seeds] for c in cells}


three = {0: "runs/s56/po_s0_box.zip", 1: "dynamix_hvd/agent/policies/default_s53.zip", 2: "runs/s56/po_s2_box.zip",
         **{s: f"runs/s57/po_s{s}_box.zip" for s in range(3, 9)}}
gp = per_cell("goodput")
print("seed | iterations | geomean / goodput | / the three-iteration draw of the seed (90% paired)")
for s in range(9):
    times = {3: per_cell(policy_tag(three[s]))}
    for it in (2, 4, 6):
        try:                  # only the variants trained and validated for this seed
            times[it] = per_cell(policy_tag(f"runs/s58/d{it}_s{s}_box.zip"))
        except (KeyError, FileNotFoundError):
            pass
    geo = {r["label"]: r["geomean"] for r in rank_draws(times, gp)}
    for it in sorted(times):
        iv = "" if it == 3 else "[%.3f, %.3f]" % paired_interval(times, it, 3)
        print(f"{s} | {it} | {geo[it]:.3f} | {iv}")
