#!/bin/bash
# session 57: what was run, in order. Draws po_s0 / po_s2 and their boxes come from runs/s56 (docs/results/s56/run.sh);
# runs/s57/eval_cache.json starts as a copy of runs/s56/eval_cache_40.json, runs/s57/select_cache.json of
# runs/s56/select_cache.json (their episodes are reused, not re-run).
set -e
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD
D() { .venv/bin/python -m dynamix_hvd.cli "$@"; }
RECIPE="--world replay --method imitate --dagger-iters 3 --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --pass-action --pass-only"
CELLS="--traces none,job_3_norm,cov:coefficient_variation --workers 8,32"
mkdir -p runs/s57
cp runs/s56/eval_cache_40.json runs/s57/eval_cache.json; cp runs/s56/select_cache.json runs/s57/select_cache.json
# six more draws of the default's recipe, seeds 3-8, two at a time (477-626 s each; train_times.txt), each with its box
for s in 3 4 5 6 7 8; do
  D train-policy $RECIPE --disable system,network --history 0 --seed $s --out runs/s57/po_s$s.zip
  D policy-support runs/s57/po_s$s.zip --worlds 24 --large-worlds 24 --box-only --out runs/s57/po_s${s}_box.zip
done
ALL="dynamix_hvd/agent/policies/default_s53.zip runs/s56/po_s0_box.zip runs/s56/po_s2_box.zip $(for s in 3 4 5 6 7 8; do echo -n "runs/s57/po_s${s}_box.zip "; done)"
# the recipe's nine draws (seeds 0-8) on the validation seeds 1000-1009, plainly and with the default as incumbent
D select-policy $ALL --jobs 2 --cache runs/s57/select_cache.json --out runs/s57/selected9.zip > docs/results/s57/select9.txt
D select-policy $ALL --incumbent runs/s56/po_s0_box.zip --cache runs/s57/select_cache.json --out runs/s57/kept9.zip > docs/results/s57/select9_incumbent.txt
# the four fastest on 30 validation seeds (1000-1029), plainly and with the incumbent
TOP4="runs/s56/po_s0_box.zip runs/s57/po_s4_box.zip runs/s57/po_s5_box.zip runs/s57/po_s3_box.zip"
D select-policy $TOP4 --seeds 30 --cache runs/s57/select_cache.json --out runs/s57/selected4_30.zip > docs/results/s57/select4_30.txt
D select-policy $TOP4 --seeds 30 --incumbent runs/s56/po_s0_box.zip --cache runs/s57/select_cache.json --out runs/s57/kept4_30.zip > docs/results/s57/select4_30_incumbent.txt
# the same four on validation worlds of transfer: the twelve pairings of the shipped workloads (YOLOv3's left out)
D select-policy $TOP4 --incumbent runs/s56/po_s0_box.zip --workloads $(ls -d runs/s55/chimeras/* | grep -v yolov3 | paste -sd,) \
  --jobs 2 --cache runs/s57/select_pairings_cache.json --out runs/s57/kept_pairings.zip > docs/results/s57/select_pairings.txt
# on validation seeds 1000-1009: mean ensembles of the top draws, the default's guards, PPO from the default's weights
A=runs/s56/po_s0_box.zip; B=runs/s57/po_s4_box.zip; C=runs/s57/po_s5_box.zip; E=runs/s57/po_s3_box.zip
D eval-replay --seeds 10 --seed-offset 1000 --jobs 2 --cache runs/s57/select_cache.json $CELLS --policies-only --oracles goodput \
  "--policy=e2=$A+$B?ensemble=mean" "--policy=e3=$A+$B+$C?ensemble=mean" "--policy=e4=$A+$B+$C+$E?ensemble=mean" \
  "--policy=w0=$A?warmup=0" "--policy=w8=$A?warmup=8" "--policy=r0=$A?refute=0" "--policy=w32=$A?warmup=32"
for n in a:61440 b:204800; do   # 292 s / 704 s
  .venv/bin/python docs/results/s57/ft_from_imitation.py --init runs/s56/po_s0.zip --out runs/s57/ft_${n%%:*}.zip \
    --timesteps ${n##*:} --lr 3e-5 --clip 0.1 --critic-steps 8192 > docs/results/s57/ft_${n%%:*}.log
  D policy-support runs/s57/ft_${n%%:*}.zip --worlds 24 --large-worlds 24 --box-only --out runs/s57/ft_${n%%:*}_box.zip
  D eval-replay --seeds 10 --seed-offset 1000 --jobs 1 --cache runs/s57/select_cache.json $CELLS --policies-only --oracles goodput \
    --policy=ft=runs/s57/ft_${n%%:*}_box.zip
done
# the same at lr 1e-5: 61,440 steps with PPO seeds 0 and 1 (ft_c, ft_e: 183 / 194 s), 204,800 steps (ft_d: 630 s)
for n in c:61440:0 e:61440:1 d:204800:0; do IFS=: read k t sd <<< "$n"
  .venv/bin/python docs/results/s57/ft_from_imitation.py --init runs/s56/po_s0.zip --out runs/s57/ft_$k.zip \
    --timesteps $t --lr 1e-5 --clip 0.1 --critic-steps 8192 --seed $sd > docs/results/s57/ft_$k.log
  D policy-support runs/s57/ft_$k.zip --worlds 24 --large-worlds 24 --box-only --out runs/s57/ft_${k}_box.zip
  D eval-replay --seeds 10 --seed-offset 1000 --jobs 2 --cache runs/s57/select_cache.json $CELLS --policies-only --oracles goodput \
    --policy=ft=runs/s57/ft_${k}_box.zip
done
# validation_variants.txt: compare_eval_caches.py on the cache cut to seeds 1000-1009 (runs/s57/select_cache_10.json)
# the test seeds 5-44 for the draws the plain selection ranks first (po5 on 30 seeds, po4 next to it)
D eval-replay --seeds 40 --seed-offset 5 --jobs 1 --cache runs/s57/eval_cache.json $CELLS \
  --policy=po0=runs/s56/po_s0_box.zip --policy=po4=runs/s57/po_s4_box.zip --policy=po5=runs/s57/po_s5_box.zip > docs/results/s57/eval_5_40.txt
# leave-one-out of the default's own seed (0): trained without W, evaluated on W (606-729 s to train; ncf: session 55)
for W in bert cifar10 deepspeech2; do
  D train-policy $RECIPE --workloads $(echo bert,cifar10,deepspeech2,ncf | tr , '\n' | grep -vx $W | paste -sd,) \
    --disable system,network --history 0 --seed 0 --out runs/s57/loo_${W}_s0.zip
  D policy-support runs/s57/loo_${W}_s0.zip --worlds 24 --large-worlds 24 --box-only --out runs/s57/loo_${W}_s0_box.zip
  D eval-replay --workloads $W --seeds 20 --seed-offset 5 --jobs 1 --cache runs/s57/eval_cache.json $CELLS \
    --policies-only --oracles goodput --policy=loo_${W}_s0=runs/s57/loo_${W}_s0_box.zip
done   # figures: loo_po0.txt (compare_eval_caches.py, goodput against each)
# validation_variants.txt and ft_paired_vs_default.txt: compare_eval_caches.py on runs/s57/select_cache.json cut to seeds 1000-1009
