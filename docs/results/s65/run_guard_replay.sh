#!/bin/bash
# Session 65: goodput and the default policy behind the live goodput guard in the replay, against the
# controllers alone; and the trust region on the default policy. 24 shipped cells x seeds 5-14.
# The unguarded episodes (goodput, ppo, static, proportional) were cached by session 64's
# run_adaptdl_replay.sh (runs/s64/adaptdl_cache.json, copied to runs/s65/guard_cache.json); ncf's
# missing ones by the --guard off line below.
set -e
C=runs/s65/guard_cache.json
R="--seeds 10 --seed-offset 5 --traces none,job_3_norm,cov:coefficient_variation --workers 8,32 --jobs 2 --cache $C"
.venv/bin/python -m dynamix_hvd.cli eval-replay $R --policies-only --oracles goodput --guard on      # 152 s
.venv/bin/python -m dynamix_hvd.cli eval-replay $R --workloads ncf --policies-only --oracles goodput --guard off
.venv/bin/python -m dynamix_hvd.cli eval-replay $R --policies-only "--policy=t05=?trust=0.05" \
    "--policy=t10=?trust=0.1" "--policy=t20=?trust=0.2"                                         # 288 s
# then the comparisons at the top of guard_replay.txt (benchmarks/compare_eval_caches.py)
