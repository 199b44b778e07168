#!/bin/bash
# Session 64: AdaptDL's own goodput code (controller "adaptdl": one local batch for every rank) on the
# emulated cluster, under a scenario whose LR rule lets the global batch grow (3 repeats, paired seeds).
set -e
cd "$(dirname "$0")/../../.."
PYTHONPATH=. .venv/bin/python -m dynamix_hvd.cli bench --scenario hetero4x_adascale \
  --controllers static,adaptdl,proportional,goodput,ppo --repeats 3 --out runs/s64/adaptdl_h4a \
  > docs/results/s64/adaptdl_hetero4x_adascale.txt 2>&1
