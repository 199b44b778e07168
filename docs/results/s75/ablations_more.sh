#!/bin/bash
# session 75: seeds 2 and 3 of the statistical ablation of the shipped recipe (rule.md, written first), with the full
# recipe's draw of seed 3 (seed 2 is session 73's mu_s2, trained by the same command); three trainings on 2 cores,
# then the 24 cells x test seeds 5-44 and the paired ratios.
source "$(dirname "$0")/common.sh"
PASS="--pass-action --pass-only"     # the recipe's action flags
if [ -f runs/s73/mu_s2_box.zip ]; then cp runs/s73/mu_s2_box.zip runs/s75/mu_s2_box.zip; fi
[ -f runs/s75/mu_s2_box.zip ] || one mu_s2 2 $PASS --disable system,network --enable mem_use &
one mu_s3 3 $PASS --disable system,network --enable mem_use &
one nostat_s2 2 $PASS --disable system,network,statistical --enable mem_use &
one nostat_s3 3 $PASS --disable system,network,statistical --enable mem_use &
wait
D eval-replay --seeds 40 --seed-offset 5 --jobs 2 --guard off --cache runs/s75/eval_cache.json $CELLS --policies-only \
  --oracles goodput --policy=full2=runs/s75/mu_s2_box.zip --policy=full3=runs/s75/mu_s3_box.zip \
  --policy=nostat2=runs/s75/nostat_s2_box.zip --policy=nostat3=runs/s75/nostat_s3_box.zip \
  --out runs/s75/eval_abl23.json > runs/s75/eval_abl23.txt 2>&1
echo "eval23 done $(date -u +%T)" >> runs/s75/queue.log
for s in 2 3; do
  ha=$(sha1sum runs/s75/nostat_s${s}_box.zip | cut -c1-12); hf=$(sha1sum runs/s75/mu_s${s}_box.zip | cut -c1-12)
  echo "== nostat_s$s / full_s$s"
  .venv/bin/python benchmarks/compare_eval_caches.py runs/s75/eval_cache.json runs/s75/eval_cache.json \
    --controller "ppo#$hf?refute=2&warmup=16" --controller-b "ppo#$ha?refute=2&warmup=16" | tail -3
done
