#!/bin/bash
# Session 64: Horovod autotune as a baseline on the emulated cluster (3 repeats, paired seeds).
set -e
cd "$(dirname "$0")/../../.."
for sc in hetero4x slow_link; do
  PYTHONPATH=. .venv/bin/python -m dynamix_hvd.cli bench --scenario $sc \
    --controllers static,static+autotune,goodput,ppo,ppo+autotune --repeats 3 --out runs/s64/autotune_$sc \
    > docs/results/s64/autotune_$sc.txt 2>&1
done
