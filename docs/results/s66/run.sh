#!/bin/bash
# Session 66: the goodput guard's retry (guard_retries = 1) measured in the replay, and issue 19's live
# node_slowdown again. Caches start from session 65's (runs/s65/guard_cache.json, runs/s65/yolo_guard.json:
# the controllers alone and behind session 65's guard, keyed '|guard'); the new guard's episodes are keyed
# '|guard-r1'. Each comparison: benchmarks/compare_eval_caches.py C C --controller A --controller-b B [--seeds 5-14].
set -e
D="dynamix eval-replay --traces none,job_3_norm,cov:coefficient_variation --workers 8,32 --jobs 2 --policies-only --oracles goodput"
# live, issue 19's node_slowdown: 5 more paired repeats (session 65: 3)
dynamix bench --scenario node_slowdown --controllers goodput,ppo --repeats 5 --out runs/s66/live19_node_slowdown \
    > runs/s66/live19_node_slowdown.txt
# held out, YOLOv3 (6 cells x seeds 5-14): 80 s
cp runs/s65/yolo_guard.json runs/s66/yolo_cache.json
$D --workloads benchmarks/heldout_workloads/yolov3 --seeds 10 --seed-offset 5 --guard on --cache runs/s66/yolo_cache.json
# the 24 shipped cells x seeds 5-14: 112 s
cp runs/s65/guard_cache.json runs/s66/guard_cache.json
$D --seeds 10 --seed-offset 5 --guard on --cache runs/s66/guard_cache.json
# held out, ImageNet (6 cells x seeds 5-9): about 20 min each
$D --workloads benchmarks/heldout_workloads/imagenet --seeds 5 --seed-offset 5 --guard on --cache runs/s66/imagenet_cache.json
$D --workloads benchmarks/heldout_workloads/imagenet --seeds 5 --seed-offset 5 --guard off --cache runs/s66/imagenet_cache.json
# how often the guard reverts and hands on
.venv/bin/python benchmarks/guard_firings.py --workloads benchmarks/heldout_workloads/yolov3 --seeds 5-14 --jobs 1
.venv/bin/python benchmarks/guard_firings.py --seeds 5-14 --jobs 1
# issue 19's headline over seeds 5-44 behind the guard and alone (static and the oracles from session 56's table)
$D --seeds 40 --seed-offset 5 --guard on --cache runs/s66/guard_cache.json     # 565 s
$D --seeds 40 --seed-offset 5 --guard off --cache runs/s66/guard_cache.json    # 462 s
.venv/bin/python docs/results/s66/headline_guarded.py runs/s66/guard_cache.json > docs/results/s66/headline_guarded.txt
# live, issue 19's other two scenarios on the final code (3 paired repeats each)
for S in hetero4x link_degrade; do
  dynamix bench --scenario $S --controllers goodput,ppo --repeats 3 --out runs/s66/live19_$S > runs/s66/live19_$S.txt
done
# the per-decision records around the firings: diag_guard.py, output in diag_guard.txt
.venv/bin/python docs/results/s66/diag_guard.py benchmarks/heldout_workloads/yolov3 cov:coefficient_variation 8 6,10
