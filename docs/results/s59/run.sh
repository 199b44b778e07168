#!/bin/bash
# session 59: what was run, in order. The default (runs/s56/po_s0_box.zip, pass_only_s0 with its box) and seed 5's draw
# (runs/s57/po_s5_box.zip) come from docs/results/s56/run.sh and s57/run.sh; runs/s59/select_cache.json starts as a copy of
# runs/s58/select_cache.json (their validation episodes are reused, not re-run). Validation is seeds 1000-1009 throughout.
set -e
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD
D() { .venv/bin/python -m dynamix_hvd.cli "$@"; }
RECIPE="--world replay --method imitate --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --pass-action --pass-only --disable system,network --history 0"
INC=runs/s56/po_s0_box.zip
mkdir -p runs/s59 runs/s59/cem
cp runs/s58/select_cache.json runs/s59/select_cache.json
box() { D policy-support $1.zip --worlds 24 --large-worlds 24 --box-only --out $1_box.zip; }
# validation against the default, then each policy's geomean per workload (compare_eval_caches on the same cache)
val() { D select-policy $INC "$@" --incumbent $INC --jobs 2 --cache runs/s59/select_cache.json --out /tmp/kept.zip | grep -v "^running\|^validation\|^kept"
  for p in "$@"; do T=$(.venv/bin/python -c "from dynamix_hvd.agent.replay_eval import policy_tag; print(policy_tag('$p'))")
    echo "$p: $(.venv/bin/python benchmarks/compare_eval_caches.py runs/s59/select_cache.json runs/s59/select_cache.json \
      --controller goodput --controller-b "$T" | grep 'per workload')"; done; }
# 1. a smaller no-op bonus (0.003 instead of 0.01; 548 / 656 s) and the regret objective (--fit regret, new; 575 / 645 s)
for s in 0 5; do D train-policy $RECIPE --dagger-iters 3 --noop-bonus 0.003 --seed $s --out runs/s59/nb003_s$s.zip; box runs/s59/nb003_s$s; done
for s in 0 5; do D train-policy $RECIPE --dagger-iters 3 --fit regret --seed $s --out runs/s59/rg_s$s.zip; box runs/s59/rg_s$s; done
# 2. the default's recipe again with its DAgger aggregate saved (the policy is pass_only_s0 byte for byte: same weights)
D train-policy $RECIPE --dagger-iters 3 --seed 0 --save-samples runs/s59/agg_po_s0.npz --out runs/s59/sv_s0.zip
# (and rg_s0 again with its aggregate kept, svrg_s0 / agg_rg_s0.npz: run beside it, not used further)
D train-policy $RECIPE --dagger-iters 3 --fit regret --seed 0 --save-samples runs/s59/agg_rg_s0.npz --out runs/s59/svrg_s0.zip
# 3. refits of that one aggregate (no DAgger iteration, 31-37 s each with the box): soft (the recipe) and regret, paired by seed
for s in 0 1 2 3 4 5 6; do
  D train-policy ${RECIPE} --dagger-iters 0 --samples runs/s59/agg_po_s0.npz --seed $s --out runs/s59/rfsoft_s$s.zip; box runs/s59/rfsoft_s$s
  D train-policy ${RECIPE} --dagger-iters 0 --samples runs/s59/agg_po_s0.npz --fit regret --seed $s --out runs/s59/rfrg_s$s.zip; box runs/s59/rfrg_s$s
done
val runs/s57/po_s5_box.zip runs/s59/nb003_s0_box.zip runs/s59/nb003_s5_box.zip runs/s59/rg_s0_box.zip runs/s59/rg_s5_box.zip \
  runs/s59/rfsoft_s2_box.zip runs/s59/rfrg_s2_box.zip > docs/results/s59/select_draws.txt
val $(for s in 0 1 3 4 5 6; do echo runs/s59/rfsoft_s${s}_box.zip runs/s59/rfrg_s${s}_box.zip; done) > docs/results/s59/refits_same_aggregate.txt
# the six soft and the six regret refits each as one mean-probability ensemble (validation, per workload)
S=$(for s in 0 1 3 4 5 6; do printf "runs/s59/rfsoft_s%s_box.zip+" $s; done); R=$(for s in 0 1 3 4 5 6; do printf "runs/s59/rfrg_s%s_box.zip+" $s; done)
D eval-replay --seeds 10 --seed-offset 1000 --jobs 2 --cache runs/s59/select_cache.json --traces none,job_3_norm,cov:coefficient_variation \
  --workers 8,32 "--policy=ensS=${S%+}?ensemble=mean" "--policy=ensR=${R%+}?ensemble=mean" | grep "^ens" > docs/results/s59/refit_ensembles.txt
# 4. the default's global logits over its own aggregate's states
.venv/bin/python docs/results/s59/logits.py $INC runs/s59/agg_po_s0.npz > docs/results/s59/logits.txt
# 5. the cross-entropy method over the default's 8 global-head biases, scored on tuning worlds (seeds 2000-2003,
#    traces none / PAI job 2 / CoV, N = 8, 16, 32; 4 generations of 8), then its mean offset on validation
.venv/bin/python docs/results/s59/bias_search.py $INC runs/s59/cem 4 8 4 > docs/results/s59/bias_search.txt
# 6. twenty more soft refits of the aggregate (seeds 7-26), with the bias search's result, on validation
for s in $(seq 7 26); do D train-policy ${RECIPE} --dagger-iters 0 --samples runs/s59/agg_po_s0.npz --seed $s --out runs/s59/rfsoft_s$s.zip; box runs/s59/rfsoft_s$s; done
val runs/s59/cem/final.zip $(for s in $(seq 7 26); do echo runs/s59/rfsoft_s${s}_box.zip; done) > docs/results/s59/refits20.txt
# 7. two refits that never depart on cifar10 / deepspeech2 (seeds 8, 10), their 1.6x and 2x logits raised by 0.08 / 0.16
.venv/bin/python -c "
import sys, numpy as np; from pathlib import Path; sys.path.insert(0, 'docs/results/s59'); from bias_search import with_offset
for s in (8, 10):
    for d in (0.08, 0.16):
        o = np.zeros(8); o[4] = o[5] = d; with_offset(Path(f'runs/s59/rfsoft_s{s}_box.zip'), o, Path(f'runs/s59/shift_s{s}_{int(d * 100)}.zip'))"
val runs/s59/shift_s8_8.zip runs/s59/shift_s8_16.zip runs/s59/shift_s10_8.zip runs/s59/shift_s10_16.zip > docs/results/s59/shift_off_refits.txt
# 8. held out: YOLOv3 x seeds 5-24 (goodput's episodes from runs/s58/yolo_cache.json)
cp runs/s58/yolo_cache.json runs/s59/yolo_cache.json   # (step 10 reuses it)
D eval-replay --workloads benchmarks/heldout_workloads/yolov3 --seeds 20 --seed-offset 5 --traces none,job_3_norm,cov:coefficient_variation \
  --workers 8,32 --jobs 2 --cache runs/s59/yolo_cache.json --policy=po0=$INC --policy=cem=runs/s59/cem/final.zip \
  --policy=s8sh16=runs/s59/shift_s8_16.zip --policy=s8=runs/s59/rfsoft_s8_box.zip > docs/results/s59/eval_yolov3.txt
# 9. the refits' modes (grow on cifar10 / deepspeech2 or not), read from the validation outputs above
.venv/bin/python docs/results/s59/refit_modes.py docs/results/s59/refits_same_aggregate.txt docs/results/s59/refits20.txt \
  docs/results/s59/select_draws.txt > docs/results/s59/refit_modes.txt
# 10. labels priced by goodput's continuation (--continuation goodput) with the default's recipe, its aggregate kept
#     (2,022 s, alone on one core after the first iteration), six refits of it, validation; then the draw on the test
#     seeds 5-44 and YOLOv3 (goodput's and the default's episodes from runs/s58's caches)
D train-policy $RECIPE --dagger-iters 3 --continuation goodput --seed 0 --save-samples runs/s59/agg_cg_s0.npz --out runs/s59/cg_s0.zip
box runs/s59/cg_s0
for s in 1 2 3 4 5 6; do D train-policy ${RECIPE} --dagger-iters 0 --samples runs/s59/agg_cg_s0.npz --continuation goodput --seed $s \
  --out runs/s59/rfcg_s$s.zip; box runs/s59/rfcg_s$s; done
val runs/s59/cg_s0_box.zip $(for s in 1 2 3 4 5 6; do echo runs/s59/rfcg_s${s}_box.zip; done) > docs/results/s59/refits_cg.txt
cp runs/s58/eval_cache.json runs/s59/eval_cache.json
D eval-replay --seeds 40 --seed-offset 5 --jobs 2 --cache runs/s59/eval_cache.json --traces none,job_3_norm,cov:coefficient_variation \
  --workers 8,32 --policy=po0=$INC --policy=cg0=runs/s59/cg_s0_box.zip > docs/results/s59/eval_cg_5_40.txt
D eval-replay --workloads benchmarks/heldout_workloads/yolov3 --seeds 20 --seed-offset 5 --traces none,job_3_norm,cov:coefficient_variation \
  --workers 8,32 --jobs 2 --cache runs/s59/yolo_cache.json --policy=po0=$INC --policy=cg0=runs/s59/cg_s0_box.zip > docs/results/s59/eval_cg_yolov3.txt
