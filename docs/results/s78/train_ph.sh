#!/usr/bin/env bash
# session 78: the shipped recipe with --pass-head, seed 0, on all four workloads (all_ph) and without ncf (loo_ncf_ph),
# two at a time, each followed by its box (as the default's). Usage: bash docs/results/s78/train_ph.sh
set -e
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
export PYTHONPATH=$PWD
D() { .venv/bin/python -m dynamix_hvd.cli "$@"; }
RECIPE="--world replay --method imitate --dagger-iters 3 --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --history 0 --pass-action --pass-only --disable system,network --enable mem_use --seed 0 --pass-head"
mkdir -p runs/s78
one() {  # name extra-args...
  N=$1; shift
  D train-policy $RECIPE "$@" --out runs/s78/$N.zip > runs/s78/$N.log 2>&1
  D policy-support runs/s78/$N.zip --worlds 24 --large-worlds 24 --box-only --out runs/s78/${N}_box.zip >> runs/s78/$N.log 2>&1
  echo "$N done $(date -u +%T)" >> runs/s78/queue.log
}
one all_ph &
one loo_ncf_ph --workloads bert,cifar10,deepspeech2 &
wait
