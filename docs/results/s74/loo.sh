#!/bin/bash
# session 74: leave-one-out of the memory-use recipe's seed 0 (session 73's mu0): trained without W, its box,
# evaluated on W (6 cells x seeds 5-24), two trainings at a time on this machine's 2 cores.
set -e
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD
D() { .venv/bin/python -m dynamix_hvd.cli "$@"; }
RECIPE="--world replay --method imitate --dagger-iters 3 --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --pass-action --pass-only"
CELLS="--traces none,job_3_norm,cov:coefficient_variation --workers 8,32"
mkdir -p runs/s74
one() {
  W=$1
  D train-policy $RECIPE --workloads $(echo bert,cifar10,deepspeech2,ncf | tr , '\n' | grep -vx $W | paste -sd,) \
    --disable system,network --enable mem_use --history 0 --seed 0 --out runs/s74/loo_${W}_mu0.zip > runs/s74/loo_${W}.log 2>&1
  D policy-support runs/s74/loo_${W}_mu0.zip --worlds 24 --large-worlds 24 --box-only --out runs/s74/loo_${W}_mu0_box.zip >> runs/s74/loo_${W}.log 2>&1
}
( one bert; one deepspeech2 ) & ( one cifar10; one ncf ) & wait
for W in bert cifar10 deepspeech2 ncf; do
  D eval-replay --workloads $W --seeds 20 --seed-offset 5 --jobs 2 --guard off --cache runs/s74/loo_cache.json $CELLS \
    --policies-only --oracles goodput --policy=loo_${W}=runs/s74/loo_${W}_mu0_box.zip
done
