#!/bin/bash
# session 58: what was run, in order. The three-iteration draws (seeds 0-8) and their boxes come from runs/s56 and
# runs/s57 (docs/results/s57/run.sh); runs/s58/select_cache.json starts as a copy of runs/s57/select_cache.json (their
# validation episodes are reused, not re-run).
set -e
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD
D() { .venv/bin/python -m dynamix_hvd.cli "$@"; }
RECIPE="--world replay --method imitate --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --pass-action --pass-only --disable system,network --history 0"
mkdir -p runs/s58
cp runs/s57/select_cache.json runs/s58/select_cache.json
# the default's recipe with 6, 2 and 4 DAgger iterations instead of 3 (the first iterations of a seed are those of its
# three-iteration draw, byte for byte: the same worlds, labels and fits), each with its box
for s in 0 5; do D train-policy $RECIPE --dagger-iters 6 --seed $s --out runs/s58/d6_s$s.zip; done          # 1162 / 1168 s
for s in 0 1 2 3 4 5 6 7 8; do D train-policy $RECIPE --dagger-iters 2 --seed $s --out runs/s58/d2_s$s.zip; done   # 298-428 s
for s in 0 5 4 3; do D train-policy $RECIPE --dagger-iters 4 --seed $s --out runs/s58/d4_s$s.zip; done
for z in runs/s58/d?_s?.zip; do D policy-support $z --worlds 24 --large-worlds 24 --box-only --out ${z%.zip}_box.zip; done
# validation seeds 1000-1009, the default (seed 0, three iterations) as the incumbent
INC=runs/s56/po_s0_box.zip
D select-policy $INC runs/s57/po_s5_box.zip runs/s58/d6_s0_box.zip runs/s58/d6_s5_box.zip --incumbent $INC --jobs 2 \
  --cache runs/s58/select_cache.json --out runs/s58/kept_d6.zip > docs/results/s58/select_d6.txt
D select-policy $INC $(ls runs/s58/d2_s?_box.zip) --incumbent $INC --jobs 2 --cache runs/s58/select_cache.json \
  --out runs/s58/kept_d2.zip > docs/results/s58/select_d2.txt
D select-policy $INC $(ls runs/s58/d4_s?_box.zip) --incumbent $INC --jobs 2 --cache runs/s58/select_cache.json \
  --out runs/s58/kept_d4.zip > docs/results/s58/select_d4.txt
# goodput's global-batch dip every 16 decisions (cifar10, N = 8, seed 5) and the overlap fit with a memory (experiment)
.venv/bin/python docs/results/s58/goodput_dip.py > docs/results/s58/goodput_dip.txt
.venv/bin/python docs/results/s58/overlap_memory.py 1000 20 base,v1,v2 runs/s58/ovl.json   # overlap_memory.txt
# sixty epochs per fit (seeds 0 and 5: 568 / 494 s), validation on 10 and 30 seeds, then the test seeds and YOLOv3
for s in 0 5; do D train-policy $RECIPE --dagger-iters 3 --epochs 60 --seed $s --out runs/s58/e60_s$s.zip
  D policy-support runs/s58/e60_s$s.zip --worlds 24 --large-worlds 24 --box-only --out runs/s58/e60_s${s}_box.zip; done
D select-policy $INC runs/s57/po_s5_box.zip runs/s58/e60_s0_box.zip runs/s58/e60_s5_box.zip --incumbent $INC --jobs 2 \
  --cache runs/s58/select_cache.json --out runs/s58/kept_e60.zip > docs/results/s58/select_e60.txt
D select-policy $INC runs/s58/e60_s0_box.zip runs/s58/e60_s5_box.zip runs/s57/po_s5_box.zip --seeds 30 --incumbent $INC \
  --jobs 2 --cache runs/s58/select_cache.json --out runs/s58/kept_e60_30.zip > docs/results/s58/select_e60_30.txt
cp runs/s57/eval_cache.json runs/s58/eval_cache.json
D eval-replay --seeds 40 --seed-offset 5 --jobs 2 --cache runs/s58/eval_cache.json --traces none,job_3_norm,cov:coefficient_variation \
  --workers 8,32 --policy=po0=$INC --policy=e60s0=runs/s58/e60_s0_box.zip --policy=e60s5=runs/s58/e60_s5_box.zip > docs/results/s58/eval_5_40.txt
E60=$(.venv/bin/python -c "from dynamix_hvd.agent.replay_eval import policy_tag; print(policy_tag('runs/s58/e60_s0_box.zip'))")
.venv/bin/python benchmarks/compare_eval_caches.py runs/s58/eval_cache.json runs/s58/eval_cache.json \
  --controller "ppo#180cd83659cd?refute=2&warmup=16" --controller-b "$E60" > docs/results/s58/paired_e60s0_vs_default.txt
D eval-replay --workloads benchmarks/heldout_workloads/yolov3 --seeds 20 --seed-offset 5 --traces none,job_3_norm,cov:coefficient_variation \
  --workers 8,32 --jobs 2 --cache runs/s58/yolo_cache.json --policies-only --oracles goodput --policy=po0=$INC --policy=e60s0=runs/s58/e60_s0_box.zip
(.venv/bin/python benchmarks/compare_eval_caches.py runs/s58/yolo_cache.json runs/s58/yolo_cache.json --controller goodput --controller-b "$E60"; echo
 .venv/bin/python benchmarks/compare_eval_caches.py runs/s58/yolo_cache.json runs/s58/yolo_cache.json --controller goodput \
  --controller-b "ppo#180cd83659cd?refute=2&warmup=16") > docs/results/s58/eval_yolov3.txt
