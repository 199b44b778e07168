#!/bin/bash
# session 77: the shipped recipe (docs/results/s75/common.sh + the memory-use column and the pass action) with the
# perturbations' batch warp reaching -0.5 (--warp-min; default -0.15): trained without ncf (leave-one-out) and on all
# four, seed 0, each with its box; two trainings at a time on this machine's 2 cores.
source "$(dirname "$0")/../s75/common.sh"
mkdir -p runs/s77
ACT="--pass-action --pass-only --disable system,network --enable mem_use"
one77() {  # name workloads
  N=$1; W=$2
  D train-policy $RECIPE $ACT --workloads $W --warp-min -0.5 --seed 0 --out runs/s77/$N.zip > runs/s77/$N.log 2>&1
  D policy-support runs/s77/$N.zip --worlds 24 --large-worlds 24 --box-only --out runs/s77/${N}_box.zip >> runs/s77/$N.log 2>&1
  echo "$N done $(date -u +%T)" >> runs/s77/queue.log
}
case "${1:-first}" in
  first) ( one77 loo_ncf_w5 bert,cifar10,deepspeech2 ) & ( one77 all_w5 bert,cifar10,deepspeech2,ncf ) & wait ;;
  loo)   ( one77 loo_bert_w5 cifar10,deepspeech2,ncf ) & ( one77 loo_cifar10_w5 bert,deepspeech2,ncf ) & wait
         one77 loo_deepspeech2_w5 bert,cifar10,ncf ;;
esac
