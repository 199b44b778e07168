#!/bin/bash
# session 77: the shipped recipe (docs/results/s75/common.sh + the memory-use column and the pass action) with wider
# perturbation ranges (replay.worlds.PerturbRange): the batch warp down to -0.5 (--warp-min; default -0.15) and, in the
# second round, the noise-scale measurement's spread up to 10x (--gns-sigma-max; default 2): trained without ncf
# (leave-one-out) and on all four, seed 0, each with its box; two trainings at a time on this machine's 2 cores.
# (The first round ran on a604b99, whose --warp-min drew the same worlds as --warp-min here.)
source "$(dirname "$0")/../s75/common.sh"
mkdir -p runs/s77
ACT="--pass-action --pass-only --disable system,network --enable mem_use"
one77() {  # name workloads range-flags...
  N=$1; W=$2; shift 2
  D train-policy $RECIPE $ACT --workloads $W "$@" --seed 0 --out runs/s77/$N.zip > runs/s77/$N.log 2>&1
  D policy-support runs/s77/$N.zip --worlds 24 --large-worlds 24 --box-only --out runs/s77/${N}_box.zip >> runs/s77/$N.log 2>&1
  echo "$N done $(date -u +%T)" >> runs/s77/queue.log
}
case "${1:-first}" in
  first)  W5="--warp-min -0.5"
           ( one77 loo_ncf_w5 bert,cifar10,deepspeech2 $W5 ) & ( one77 all_w5 bert,cifar10,deepspeech2,ncf $W5 ) & wait ;;
  second) WS="--warp-min -0.5 --gns-sigma-max 10"
           ( one77 loo_ncf_ws bert,cifar10,deepspeech2 $WS ) & ( one77 all_ws bert,cifar10,deepspeech2,ncf $WS ) & wait ;;
  third)  WS="--warp-min -0.5 --gns-sigma-max 10"; ACT="--pass-action --pass-only --disable system,network"
           one77 loo_ncf_wsnm bert,cifar10,deepspeech2 $WS ;;   # without the memory-use column (the session-56 recipe's inputs)
esac
