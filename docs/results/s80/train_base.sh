#!/usr/bin/env bash
# session 80: the default's recipe (session 73's memory-use recipe), seed 0, on all four and without ncf, each saving
# its final DAgger aggregate (--save-samples) for a pass head fitted on top (docs/results/s80/frozen_pass.py), and
# each with its box. Usage: bash docs/results/s80/train_base.sh [name:"--workloads A,B,C" ...]
set -e
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
export PYTHONPATH=$PWD
D() { .venv/bin/python -m dynamix_hvd.cli "$@"; }
RECIPE="--world replay --method imitate --disable system,network --enable mem_use --history 0 --dagger-iters 3 --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --pass-action --pass-only --seed 0"
one() {  # name extra-args...
  N=$1; shift
  D train-policy $RECIPE "$@" --save-samples runs/s80/$N.npz --out runs/s80/$N.zip > runs/s80/$N.log 2>&1
  D policy-support runs/s80/$N.zip --worlds 24 --large-worlds 24 --box-only --out runs/s80/${N}_box.zip >> runs/s80/$N.log 2>&1
  echo "$N done $(date -u +%T)" >> runs/s80/queue.log
}
if [ $# -eq 0 ]; then
  one mu_s0 &
  one loo_ncf_mu_s0 --workloads bert,cifar10,deepspeech2 &
  wait
else   # e.g. loo_bert_mu_s0:"--workloads cifar10,deepspeech2,ncf"
  for spec in "$@"; do one "${spec%%:*}" ${spec#*:} & done
  wait
fi
