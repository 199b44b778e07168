#!/bin/bash
# session 80: issue 19's three live scenarios for the default + a pass head fitted on top (runs/s80/mu_s0_fp_box.zip)
# against goodput, one bench per scenario, 3 repeats, nothing else running on the machine (as docs/results/s74/live.sh).
set -e
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD
for S in hetero4x node_slowdown link_degrade; do
  .venv/bin/python -m dynamix_hvd.cli bench --scenario $S --controllers goodput,ppo=runs/s80/mu_s0_fp_box.zip --repeats 3 \
    --out runs/s80/live19_$S > docs/results/s80/live19_$S.txt 2>&1
done
