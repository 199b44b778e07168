#!/bin/bash
# session 56: what was run, in order (times in docs/policy.md). Draws of session 55 are read from runs/s55
# (docs/results/s55/run.sh makes them); the default's recipe is retrained here with seeds 0 and 2.
set -e
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD
D() { .venv/bin/python -m dynamix_hvd.cli "$@"; }
P=runs/s55
RECIPE="--world replay --method imitate --dagger-iters 3 --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --pass-action --pass-only"
mkdir -p runs/s56
DRAWS="--policy=default=dynamix_hvd/agent/policies/default_s53.zip --policy=po0=runs/s56/po_s0_box.zip --policy=po2=runs/s56/po_s2_box.zip
  --policy=mcf0=$P/mcf_s0_box.zip --policy=mcf1=$P/mcf_s1_box.zip --policy=mcf2=$P/mcf_s2_box.zip --policy=mcf3=$P/mcf_s3_box.zip
  --policy=all2=$P/all_s2_box.zip --policy=nonet2=$P/nonet_s2_box.zip"
CELLS="--traces none,job_3_norm,cov:coefficient_variation --workers 8,32 --jobs 1"
# the default's recipe, seeds 0 and 2 (575 / 590 s, beside an evaluation)
for s in 0 2; do
  D train-policy $RECIPE --disable system,network --history 0 --seed $s --out runs/s56/po_s$s.zip
  D policy-support runs/s56/po_s$s.zip --worlds 24 --large-worlds 24 --box-only --out runs/s56/po_s${s}_box.zip
done
# fresh seeds 25-44: baselines, oracles and the draws (1,256 s for all but po0 / po2, then 206 s for those two)
D eval-replay --seeds 20 --seed-offset 25 --cache runs/s56/eval_cache_fresh.json $CELLS $DRAWS > docs/results/s56/eval_25_20.txt
# seeds 5-24 (session 55's cache; po0 / po2 214 s)
D eval-replay --seeds 20 --seed-offset 5 --cache runs/s55/eval_cache.json $CELLS $DRAWS > docs/results/s56/eval_5_20.txt
# the 40 seeds together (the two caches merged: their keys hold the seed)
python3 -c "import json; a=json.load(open('runs/s55/eval_cache.json')); a.update(json.load(open('runs/s56/eval_cache_fresh.json'))); json.dump(a, open('runs/s56/eval_cache_40.json','w'))"
D eval-replay --seeds 40 --seed-offset 5 --cache runs/s56/eval_cache_40.json $CELLS $DRAWS > docs/results/s56/eval_5_40.txt
# paired against the default, 40 seeds
for pair in "mcf0 8049b1fc3e09" "all2 e5ca785aa4ed" "nonet2 6ef3a742f2db" "po0 180cd83659cd"; do set -- $pair
  echo "== $1 / default (40 seeds)"; .venv/bin/python benchmarks/compare_eval_caches.py runs/s56/eval_cache_40.json runs/s56/eval_cache_40.json \
    --controller "ppo#bb514a330074?refute=2&warmup=16" --controller-b "ppo#$2?refute=2&warmup=16" | tail -4
done > docs/results/s56/paired_vs_default.txt
# the draws on validation seeds 1000-1009, the fastest kept (2,400 episodes on 2 processes, 8 min)
D select-policy dynamix_hvd/agent/policies/default_s53.zip runs/s56/po_s0_box.zip runs/s56/po_s2_box.zip \
  $P/mcf_s0_box.zip $P/mcf_s1_box.zip $P/mcf_s2_box.zip $P/mcf_s3_box.zip $P/all_s2_box.zip $P/nonet_s2_box.zip \
  --jobs 2 --cache runs/s56/select_cache.json --out runs/s56/selected9.zip > docs/results/s56/select9.txt
# the best per-workload figure any learned policy has reached (every evaluation recorded since session 22)
.venv/bin/python docs/results/s56/bert_floor.py > docs/results/s56/bert_floor.txt
# live, each bench alone (about 11 min each)
for S in hetero4x node_slowdown link_degrade; do
  D bench --scenario $S --controllers static,goodput,ppo=runs/s55/mcf_s0_box.zip --repeats 3 --out runs/s56/live/$S > docs/results/s56/live/$S.txt
done
# the same for the default's recipe, seed 0 (the new default), each bench alone
for S in hetero4x node_slowdown link_degrade; do
  D bench --scenario $S --controllers static,goodput,ppo=runs/s56/po_s0_box.zip --repeats 3 --out runs/s56/live_po0/$S > docs/results/s56/live_po0/$S.txt
done
.venv/bin/python benchmarks/live_support_gap.py "runs/s56/live/hetero4x/ppo=runs_s55_mcf_s0_box.zip" --policy runs/s55/mcf_s0_box.zip \
  > docs/results/s56/live/support_gap_mcf0_hetero4x.txt
# the default recipe's three draws alone (the validation episodes are cached by the run above)
D select-policy dynamix_hvd/agent/policies/default_s53.zip runs/s56/po_s0_box.zip runs/s56/po_s2_box.zip \
  --cache runs/s56/select_cache.json --out runs/s56/selected_po.zip > docs/results/s56/select_po.txt
# held out: YOLOv3 (84 s, goodput and the old default cached by session 55) and the 120 pairings (468 s)
D eval-replay --workloads benchmarks/heldout_workloads/yolov3 --seeds 20 --seed-offset 5 $CELLS --cache runs/s55/yolo_cache.json \
  --policy=default=dynamix_hvd/agent/policies/default_s53.zip --policy=po0=runs/s56/po_s0_box.zip > docs/results/s56/eval_yolov3.txt
D eval-replay --workloads $(ls -d runs/s55/chimeras/* | paste -sd,) --seeds 10 --seed-offset 5 $CELLS \
  --cache runs/s55/chim_cache.json --policies-only --oracles goodput --policy=po0=runs/s56/po_s0_box.zip
for h in 180cd83659cd bb514a330074; do echo "== ppo#$h / goodput, 120 pairings, seeds 5-14"
  .venv/bin/python benchmarks/compare_eval_caches.py runs/s55/chim_cache.json runs/s55/chim_cache.json --controller goodput \
    --controller-b "ppo#$h?refute=2&warmup=16" | tail -3; done > docs/results/s56/chimeras.txt
# the new default in the package: its box, byte for byte the file evaluated above
cp runs/s56/po_s0.zip dynamix_hvd/agent/policies/pass_only_s0.zip
D policy-support dynamix_hvd/agent/policies/pass_only_s0.zip --worlds 24 --large-worlds 24 --box-only --out dynamix_hvd/agent/policies/default.zip
cmp dynamix_hvd/agent/policies/default.zip runs/s56/po_s0_box.zip
# decision latency, alternated with the old default (while a CI run used both cores)
for r in 1 2; do for p in default default_s53; do
  .venv/bin/python benchmarks/bench_decide_scale.py --workers 4,1024 --decisions 100 --policy dynamix_hvd/agent/policies/$p.zip
done; done > docs/results/s56/bench_decide_scale.txt
# held out: ImageNet, 5 seeds (goodput and both defaults; 1,253 s, the last third beside a second process with --reverse)
D eval-replay --workloads benchmarks/heldout_workloads/imagenet --seeds 5 --seed-offset 5 $CELLS --cache runs/s56/inet_cache.json \
  --policies-only --oracles goodput --policy=po0=dynamix_hvd/agent/policies/default.zip --policy=old=dynamix_hvd/agent/policies/default_s53.zip
for h in 180cd83659cd bb514a330074; do .venv/bin/python benchmarks/compare_eval_caches.py runs/s56/inet_cache.json \
  runs/s56/inet_cache.json --controller goodput --controller-b "ppo#$h?refute=2&warmup=16"; done
