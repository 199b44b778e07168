#!/bin/bash
# Session 65: goodput and the default policy behind the live goodput guard in the replay, against the
# controllers alone; the policy's fallback (proportional, then goodput, its anchor); the trust region.
# 24 shipped cells x seeds 5-14. The unguarded episodes (goodput, ppo, static, proportional) were cached by
# session 64's run_adaptdl_replay.sh (runs/s64/adaptdl_cache.json, copied to runs/s65/guard_cache.json);
# ncf's missing ones by the --guard off line below.
set -e
C=runs/s65/guard_cache.json
R="--seeds 10 --seed-offset 5 --traces none,job_3_norm,cov:coefficient_variation --workers 8,32 --jobs 2 --cache $C"
E=".venv/bin/python -m dynamix_hvd.cli eval-replay $R --policies-only"
$E --workloads ncf --oracles goodput --guard off
# (the day's first run was the default before its fallback went to goodput: --policy=ppo=?fallback=proportional)
$E --oracles goodput --policy=ppo=?fallback=proportional --guard on                      # 152 s
$E --guard on                                                                             # 100 s: the default
$E --guard on "--policy=t05=?trust=0.05&fallback=proportional" "--policy=t10=?trust=0.1&fallback=proportional" \
   "--policy=t20=?trust=0.2&fallback=proportional"                                        # 288 s
# then each comparison in guard_replay.txt: benchmarks/compare_eval_caches.py --seeds 5-14 $C $C --controller A --controller-b B
