#!/bin/bash
# Session 64: AdaptDL's own goodput code (controller "adaptdl") in the replay world, the 24 shipped cells x
# 10 test seeds (seeds 5-14; an earlier start of the same command left some cells with seeds 15-24 in the cache, which the comparisons use too), with static, proportional, goodput and the shipped policy in the same worlds.
set -e
cd "$(dirname "$0")/../../.."
mkdir -p runs/s64
PYTHONPATH=. .venv/bin/python -m dynamix_hvd.cli eval-replay --seeds 10 --seed-offset 5 \
  --traces none,job_3_norm,cov:coefficient_variation --workers 8,32 --jobs 2 --policies-only \
  --oracles adaptdl,goodput,static,proportional --cache runs/s64/adaptdl_cache.json \
  > docs/results/s64/adaptdl_replay_run.txt 2>&1
C=runs/s64/adaptdl_cache.json
PPO=$(.venv/bin/python -c "import json;print(next(k.split('|')[4] for k in json.load(open('$C')) if k.split('|')[4].startswith('ppo')))")
for pair in "goodput adaptdl" "adaptdl $PPO" "static adaptdl" "proportional adaptdl" "adaptdl goodput"; do
  set -- $pair
  echo "== $2 / $1"
  PYTHONPATH=. .venv/bin/python benchmarks/compare_eval_caches.py $C $C --controller $1 --controller-b "$2"
done > docs/results/s64/adaptdl_replay.txt
