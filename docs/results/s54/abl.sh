#!/bin/bash
# session 54: ablations of the shipped recipe (pass-only), seeds 0 and 1, two at a time; supports box-only as the default's
cd /work/main
export PYTHONPATH=/work/main
train() {  # name seed disable history
  .venv/bin/python -m dynamix_hvd.cli train-policy --world replay --method imitate --disable $3 --history $4 \
    --dagger-iters 3 --worlds-per-iter 20 --epochs 20 --seed $2 --horizon 20 --threads 1 --pass-hold --balance worlds \
    --pass-action --pass-only --out runs/s54/$1.zip > runs/s54/$1.log 2>&1
  .venv/bin/python -m dynamix_hvd.cli policy-support runs/s54/$1.zip --worlds 24 --large-worlds 24 --box-only --out runs/s54/$1_box.zip >> runs/s54/$1.log 2>&1
  echo "$1 done $(date)" >> runs/s54/abl_queue.log
}
for v in "nostat system,network,statistical 0" "hist8 system,network 8" "net system 0"; do
  set -- $v
  train ${1}_s0 0 $2 $3 &
  train ${1}_s1 1 $2 $3 &
  wait
done
echo done > runs/s54/abl.done
