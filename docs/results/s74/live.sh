#!/bin/bash
# session 74: issue 19's three live scenarios for the memory-use draw mu0 against goodput, one bench per scenario,
# 3 repeats, nothing else running on the machine.
set -e
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD
for S in hetero4x node_slowdown link_degrade; do
  .venv/bin/python -m dynamix_hvd.cli bench --scenario $S --controllers goodput,ppo=runs/s73/mu_s0_box.zip --repeats 3 \
    --out runs/s74/live19_$S > docs/results/s74/live19_$S.txt 2>&1
done
