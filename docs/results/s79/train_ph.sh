#!/usr/bin/env bash
# session 79: seeds 1 and 2 of session 78's pass-head recipe (the shipped recipe + --pass-head) on all four
# workloads, two at a time, each followed by its box (as the default's). Usage: bash docs/results/s79/train_ph.sh
# [extra name:args ...]   e.g. loo_ncf_ph_s1:"--seed 1 --workloads bert,cifar10,deepspeech2"
set -e
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
export PYTHONPATH=$PWD
D() { .venv/bin/python -m dynamix_hvd.cli "$@"; }
RECIPE="--world replay --method imitate --dagger-iters 3 --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --history 0 --pass-action --pass-only --disable system,network --enable mem_use --pass-head"
mkdir -p runs/s79
one() {  # name extra-args...
  N=$1; shift
  D train-policy $RECIPE "$@" --out runs/s79/$N.zip > runs/s79/$N.log 2>&1
  D policy-support runs/s79/$N.zip --worlds 24 --large-worlds 24 --box-only --out runs/s79/${N}_box.zip >> runs/s79/$N.log 2>&1
  echo "$N done $(date -u +%T)" >> runs/s79/queue.log
}
if [ $# -eq 0 ]; then
  one all_ph_s1 --seed 1 &
  one all_ph_s2 --seed 2 &
  wait
else
  for spec in "$@"; do one "${spec%%:*}" ${spec#*:} & done
  wait
fi
