#!/bin/bash
# session 73: the default's recipe with one system column, the rank's memory use (b_i / max_batch_i), two seeds.
# Times on this machine (2 cores): 1,075 / 1,141 s per draw two at a time; boxes 31 s; validation 960 episodes;
# the test seeds 5-24 1,440 episodes (goodput, the default, mu0).
set -e
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD
D() { .venv/bin/python -m dynamix_hvd.cli "$@"; }
mkdir -p runs/s73
for s in 0 1; do
  D train-policy --world replay --method imitate --disable system,network --enable mem_use --history 0 --dagger-iters 3 \
    --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --pass-action --pass-only \
    --seed $s --out runs/s73/mu_s$s.zip
  D policy-support runs/s73/mu_s$s.zip --worlds 24 --large-worlds 24 --box-only --out runs/s73/mu_s${s}_box.zip
done
# validation seeds 1000-1009, the shipped default as the incumbent
D select-policy dynamix_hvd/agent/policies/default.zip runs/s73/mu_s0_box.zip runs/s73/mu_s1_box.zip \
  --incumbent dynamix_hvd/agent/policies/default.zip --jobs 2 --cache runs/s73/select_cache.json --out runs/s73/kept.zip \
  > docs/results/s73/select_mu.txt
# test seeds 5-44 (no choice reads them): goodput, the default, mu0 (271 s for each 20 seeds)
for off in 5 25; do D eval-replay --seeds 20 --seed-offset $off --traces none,job_3_norm,cov:coefficient_variation --workers 8,32 --jobs 2 \
  --guard off --cache runs/s73/eval_cache.json --policy=default=dynamix_hvd/agent/policies/default.zip \
  --policy=mu0=runs/s73/mu_s0_box.zip --policies-only --oracles goodput; done
DEF='ppo#180cd83659cd?refute=2&warmup=16'; MU='ppo#6311a5a02a7c?refute=2&warmup=16'; C=runs/s73/eval_cache.json
.venv/bin/python docs/results/s73/headline.py $C "default=$DEF" "mu0=$MU" > docs/results/s73/headline_5_44.txt
for s in 5-24 25-44; do for b in "$DEF" "$MU"; do echo "== $b / goodput, seeds $s"
  .venv/bin/python benchmarks/compare_eval_caches.py $C $C --seeds $s --controller goodput --controller-b "$b" | tail -n 4; done
  echo "== mu0 / default, seeds $s"; .venv/bin/python benchmarks/compare_eval_caches.py $C $C --seeds $s --controller "$DEF" --controller-b "$MU" | tail -n 4
done > docs/results/s73/paired.txt
# held out: YOLOv3 (6 cells x seeds 5-24)
D eval-replay --workloads benchmarks/heldout_workloads/yolov3 --seeds 20 --seed-offset 5 --traces none,job_3_norm,cov:coefficient_variation \
  --workers 8,32 --jobs 2 --guard off --cache runs/s73/yolo_cache.json --policy=default=dynamix_hvd/agent/policies/default.zip \
  --policy=mu0=runs/s73/mu_s0_box.zip --policies-only --oracles goodput
for b in "$DEF" "$MU"; do echo "== $b / goodput, YOLOv3"; .venv/bin/python benchmarks/compare_eval_caches.py runs/s73/yolo_cache.json \
  runs/s73/yolo_cache.json --controller goodput --controller-b "$b" | tail -n 10; done > docs/results/s73/yolov3.txt
.venv/bin/python docs/results/s73/growth_pays.py > docs/results/s73/growth_pays.txt
# a third seed after the rest (1,031 s alone), then validation again with the three draws
D train-policy --world replay --method imitate --disable system,network --enable mem_use --history 0 --dagger-iters 3 \
  --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --pass-action --pass-only \
  --seed 2 --out runs/s73/mu_s2.zip
D policy-support runs/s73/mu_s2.zip --worlds 24 --large-worlds 24 --box-only --out runs/s73/mu_s2_box.zip
D select-policy dynamix_hvd/agent/policies/default.zip runs/s73/mu_s0_box.zip runs/s73/mu_s1_box.zip runs/s73/mu_s2_box.zip \
  --incumbent dynamix_hvd/agent/policies/default.zip --jobs 2 --cache runs/s73/select_cache.json --out runs/s73/kept3.zip \
  > docs/results/s73/select_mu3.txt
