#!/bin/bash
# session 54: evaluate each ablation pair (box-only supports, default guards) on the 24 shipped cells x seeds 5-24 once trained
cd /work/main
export PYTHONPATH=/work/main
for v in nostat hist8 net; do
  while [ ! -f runs/s54/${v}_s0_box.zip ] || [ ! -f runs/s54/${v}_s1_box.zip ]; do sleep 20; done
  nice -n 5 .venv/bin/python -m dynamix_hvd.cli eval-replay --seeds 20 --seed-offset 5 --jobs 1 --cache runs/s54/eval_cache.json \
    --traces none,job_3_norm,cov:coefficient_variation --workers 8,32 \
    --policy=full0=runs/s53/po_s0_box.zip --policy=full1=dynamix_hvd/agent/policies/default.zip \
    --policy=${v}0=runs/s54/${v}_s0_box.zip --policy=${v}1=runs/s54/${v}_s1_box.zip \
    --out runs/s54/eval_${v}.json > runs/s54/eval_${v}.txt 2>&1
  echo "eval $v done $(date)" >> runs/s54/abl_queue.log
done
