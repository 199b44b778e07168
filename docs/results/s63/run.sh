#!/bin/bash
# Session 63: the commands behind this directory's files, each alone on the 2-core machine, in this order.
cd "$(dirname "$0")/../../.."
# make demo's figures (after the fresh-clone CI run, setup cached): make_demo.txt, docs/demo_report_s63.png
bash scripts/demo.sh > docs/results/s63/make_demo.txt 2>&1
# a live scenario and a PAI-format trace no code here has seen (live_novel_s63.txt)
.venv/bin/python docs/results/s63/make_novel_live.py
.venv/bin/python -m dynamix_hvd.cli bench --scenario docs/results/s63/novel_scenario_s63.toml \
    --controllers static,proportional,goodput,ppo --repeats 3 --out runs/s63/novel > docs/results/s63/live_novel_s63.txt 2>&1
.venv/bin/python -m dynamix_hvd.cli bench --scenario docs/results/s63/novel_scenario_s63.toml --engine ddp \
    --controllers static,proportional,goodput,ppo --repeats 3 --out runs/s63/novel_ddp > docs/results/s63/live_novel_s63_ddp.txt 2>&1
# the shipped default at every world size it trained on (96 cells x 20 seeds; 2187 s on 2 processes)
.venv/bin/python -m dynamix_hvd.cli eval-replay --seeds 20 --seed-offset 5 \
    --traces none,job_2_norm,job_3_norm,cov:coefficient_variation --workers 2,4,8,16,32,64 --jobs 2 \
    --cache runs/s63/sizes_cache.json --policies-only --oracles goodput,static,proportional
for b in goodput static proportional; do
  .venv/bin/python benchmarks/compare_eval_caches.py runs/s63/sizes_cache.json runs/s63/sizes_cache.json \
      --controller $b --controller-b 'ppo#180cd83659cd?refute=2&warmup=16' --by-workers > docs/results/s63/sizes_ppo_vs_$b.txt
done
