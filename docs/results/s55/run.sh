#!/bin/bash
# session 55: what was run, in order (two at a time on the 2 cores; times in docs/policy.md).
# The job's mean allreduce fraction (mean_comm_frac) as the only network feature, four training seeds;
# the mean-probability ensemble of the four; leave-one-out on cifar10 and ncf; a third training seed
# of the all-groups recipe and of it without the network features.
set -e
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD
D() { .venv/bin/python -m dynamix_hvd.cli "$@"; }
EVAL="--seeds 20 --seed-offset 5 --jobs 1 --cache runs/s55/eval_cache.json --traces none,job_3_norm,cov:coefficient_variation --workers 8,32"
RECIPE="--world replay --method imitate --dagger-iters 3 --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --pass-action --pass-only"
mkdir -p runs/s55
# baselines, oracles and the shipped default (868 s)
D eval-replay $EVAL --policy=default=dynamix_hvd/agent/policies/default.zip --out runs/s55/eval_default.json
# the default's recipe with mean_comm_frac kept (536-706 s each)
for s in 0 1 2 3; do
  D train-policy $RECIPE --disable system,network --enable mean_comm_frac --history 0 --seed $s --out runs/s55/mcf_s$s.zip
  D policy-support runs/s55/mcf_s$s.zip --worlds 24 --large-worlds 24 --box-only --out runs/s55/mcf_s${s}_box.zip
done
D eval-replay $EVAL --policy=default=dynamix_hvd/agent/policies/default.zip --policy=mcf0=runs/s55/mcf_s0_box.zip \
  --policy=mcf1=runs/s55/mcf_s1_box.zip --policy=mcf2=runs/s55/mcf_s2_box.zip --policy=mcf3=runs/s55/mcf_s3_box.zip \
  --out runs/s55/eval_mcf.json
# the four as one ensemble, mean probabilities
P=runs/s55
D eval-replay $EVAL --policy=default=dynamix_hvd/agent/policies/default.zip \
  "--policy=ens4=$P/mcf_s0_box.zip+$P/mcf_s1_box.zip+$P/mcf_s2_box.zip+$P/mcf_s3_box.zip?ensemble=mean" --out runs/s55/eval_ens4.json
# leave-one-out: trained without W, evaluated on W (399-948 s each)
loo() {  # W SEED NAME EXTRA...
  local W=$1 S=$2 N=$3; shift 3
  D train-policy $RECIPE --workloads $(echo bert,cifar10,deepspeech2,ncf | tr , '\n' | grep -vx $W | paste -sd,) \
    --disable system,network --history 0 --seed $S "$@" --out runs/s55/loo_${W}_${N}_s$S.zip
  D policy-support runs/s55/loo_${W}_${N}_s$S.zip --worlds 24 --large-worlds 24 --box-only --out runs/s55/loo_${W}_${N}_s${S}_box.zip
}
loo cifar10 0 mcf --enable mean_comm_frac; loo ncf 0 mcf --enable mean_comm_frac
loo ncf 1 mcf --enable mean_comm_frac;     loo ncf 0 def;  loo cifar10 1 mcf --enable mean_comm_frac
loo ncf 2 mcf --enable mean_comm_frac;     loo ncf 3 mcf --enable mean_comm_frac
loo bert 0 mcf --enable mean_comm_frac;    loo deepspeech2 0 mcf --enable mean_comm_frac
D eval-replay $EVAL --workloads cifar10 --policy=mcf0=runs/s55/mcf_s0_box.zip --loo cifar10=runs/s55/loo_cifar10_mcf_s0_box.zip --out runs/s55/eval_loo_cifar10.json
D eval-replay $EVAL --workloads ncf --policy=loo_mcf0=runs/s55/loo_ncf_mcf_s0_box.zip --policy=loo_mcf1=runs/s55/loo_ncf_mcf_s1_box.zip \
  --policy=loo_mcf2=runs/s55/loo_ncf_mcf_s2_box.zip --policy=loo_mcf3=runs/s55/loo_ncf_mcf_s3_box.zip \
  --policy=loo_def0=runs/s55/loo_ncf_def_s0_box.zip --out runs/s55/eval_loo_ncf.json
D eval-replay $EVAL --workloads cifar10 --policy=loo_mcf0=runs/s55/loo_cifar10_mcf_s0_box.zip \
  --policy=loo_mcf1=runs/s55/loo_cifar10_mcf_s1_box.zip --out runs/s55/eval_loo_cifar10_2.json
D eval-replay $EVAL --workloads bert,deepspeech2 --loo bert=runs/s55/loo_bert_mcf_s0_box.zip \
  --loo deepspeech2=runs/s55/loo_deepspeech2_mcf_s0_box.zip --out runs/s55/eval_loo_bert_ds2.json
# a third seed of the all-groups recipe (network + statistical + history 8) and of it without the network features
for v in "all system" "nonet system,network"; do set -- $v
  D train-policy $RECIPE --disable $2 --history 8 --seed 2 --out runs/s55/$1_s2.zip
  D policy-support runs/s55/$1_s2.zip --worlds 24 --large-worlds 24 --box-only --out runs/s55/$1_s2_box.zip
done
D eval-replay $EVAL --policy=all2=runs/s55/all_s2_box.zip --policy=nonet2=runs/s55/nonet_s2_box.zip --out runs/s55/eval_abl_s2.json
.venv/bin/python benchmarks/compare_eval_caches.py runs/s55/eval_cache.json runs/s55/eval_cache.json \
  --controller "ppo#e5ca785aa4ed?refute=2&warmup=16" --controller-b "ppo#6ef3a742f2db?refute=2&warmup=16"   # nonet2 / all2
# held out: YOLOv3 (202 s)
D eval-replay --workloads benchmarks/heldout_workloads/yolov3 --seeds 20 --seed-offset 5 --traces none,job_3_norm,cov:coefficient_variation --workers 8,32 --jobs 2 --cache runs/s55/yolo_cache.json \
  --policy=default=dynamix_hvd/agent/policies/default.zip --policy=mcf0=runs/s55/mcf_s0_box.zip --policy=mcf1=runs/s55/mcf_s1_box.zip --out runs/s55/eval_yolov3.json
# held out: the 120 pairings (about 23 min, in two runs sharing the cache)
.venv/bin/python benchmarks/chimera_workloads.py --out runs/s55/chimeras
D eval-replay --workloads $(ls -d runs/s55/chimeras/* | paste -sd,) --seeds 10 --seed-offset 5 --traces none,job_3_norm,cov:coefficient_variation \
  --workers 8,32 --jobs 2 --cache runs/s55/chim_cache.json --policies-only --oracles goodput \
  --policy=default=dynamix_hvd/agent/policies/default.zip --policy=mcf0=runs/s55/mcf_s0_box.zip --policy=mcf1=runs/s55/mcf_s1_box.zip
for h in bb514a330074 8049b1fc3e09 18bd20bd3478; do   # default, mcf0, mcf1
  .venv/bin/python benchmarks/compare_eval_caches.py runs/s55/chim_cache.json runs/s55/chim_cache.json --controller goodput \
    --controller-b "ppo#$h?refute=2&warmup=16"
done
