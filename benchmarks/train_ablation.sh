#!/bin/bash
# One ablation training of the replay-world policy (docs/policy.md, "Ablations, two training seeds
# each"): NAME FLAGS... -> runs/abl/NAME.zip (+ .json, .log). The shipped configuration plus FLAGS
# (a later --global-scales or --history wins). All ten, two at a time:
#   xargs -P 2 -L 1 bash benchmarks/train_ablation.sh < docs/results/s23/ablation_jobs.txt
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p runs/abl
name=$1; shift
hist="--history 0"; for a in "$@"; do [ "$a" = "--history" ] && hist=""; done
exec .venv/bin/python -m dynamix_hvd.cli train-policy --world replay --timesteps "${TIMESTEPS:-20000}" --anchor goodput $hist \
  --global-scales 0.5,0.8,1.0,1.25,1.6,2.0,3.0 "$@" --out "runs/abl/$name.zip" --quiet > "runs/abl/$name.log" 2>&1
