#!/bin/bash
# session 54: the "split only" ablation of the shipped recipe (no global action: --global-scales 1.0, so no pass either), seeds 0 and 1
cd /work/main
export PYTHONPATH=/work/main
while [ ! -f runs/s54/abl.done ]; do sleep 15; done
for s in 0 1; do
  ( .venv/bin/python -m dynamix_hvd.cli train-policy --world replay --method imitate --disable system,network --history 0 \
      --dagger-iters 3 --worlds-per-iter 20 --epochs 20 --seed $s --horizon 20 --threads 1 --pass-hold --balance worlds \
      --global-scales 1.0 --out runs/s54/split_s$s.zip > runs/s54/split_s$s.log 2>&1
    .venv/bin/python -m dynamix_hvd.cli policy-support runs/s54/split_s$s.zip --worlds 24 --large-worlds 24 --box-only --out runs/s54/split_s${s}_box.zip >> runs/s54/split_s$s.log 2>&1
    echo "split_s$s done $(date)" >> runs/s54/abl_queue.log ) &
done
wait
nice -n 5 .venv/bin/python -m dynamix_hvd.cli eval-replay --seeds 20 --seed-offset 5 --jobs 1 --cache runs/s54/eval_cache.json \
    --traces none,job_3_norm,cov:coefficient_variation --workers 8,32 \
    --policy=full0=runs/s53/po_s0_box.zip --policy=full1=dynamix_hvd/agent/policies/default.zip \
    --policy=split0=runs/s54/split_s0_box.zip --policy=split1=runs/s54/split_s1_box.zip \
    --out runs/s54/eval_split.json > runs/s54/eval_split.txt 2>&1
echo "eval split done $(date)" >> runs/s54/abl_queue.log
