#!/bin/bash
# session 58: what was run, in order. The three-iteration draws (seeds 0-8) and their boxes come from runs/s56 and
# runs/s57 (docs/results/s57/run.sh); runs/s58/select_cache.json starts as a copy of runs/s57/select_cache.json (their
# validation episodes are reused, not re-run).
set -e
cd "$(dirname "$0")/../../.."
export PYTHONPATH=$PWD
D() { .venv/bin/python -m dynamix_hvd.cli "$@"; }
RECIPE="--world replay --method imitate --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --pass-action --pass-only --disable system,network --history 0"
mkdir -p runs/s58
cp runs/s57/select_cache.json runs/s58/select_cache.json
# the default's recipe with 6, 2 and 4 DAgger iterations instead of 3 (the first iterations of a seed are those of its
# three-iteration draw, byte for byte: the same worlds, labels and fits), each with its box
for s in 0 5; do D train-policy $RECIPE --dagger-iters 6 --seed $s --out runs/s58/d6_s$s.zip; done          # 1162 / 1168 s
for s in 0 1 2 3 4 5 6 7 8; do D train-policy $RECIPE --dagger-iters 2 --seed $s --out runs/s58/d2_s$s.zip; done   # 298-428 s
for s in 0 5 4 3; do D train-policy $RECIPE --dagger-iters 4 --seed $s --out runs/s58/d4_s$s.zip; done
for z in runs/s58/d?_s?.zip; do D policy-support $z --worlds 24 --large-worlds 24 --box-only --out ${z%.zip}_box.zip; done
# validation seeds 1000-1009, the default (seed 0, three iterations) as the incumbent
INC=runs/s56/po_s0_box.zip
D select-policy $INC runs/s57/po_s5_box.zip runs/s58/d6_s0_box.zip runs/s58/d6_s5_box.zip --incumbent $INC --jobs 2 \
  --cache runs/s58/select_cache.json --out runs/s58/kept_d6.zip > docs/results/s58/select_d6.txt
D select-policy $INC $(ls runs/s58/d2_s?_box.zip) --incumbent $INC --jobs 2 --cache runs/s58/select_cache.json \
  --out runs/s58/kept_d2.zip > docs/results/s58/select_d2.txt
D select-policy $INC $(ls runs/s58/d4_s?_box.zip) --incumbent $INC --jobs 2 --cache runs/s58/select_cache.json \
  --out runs/s58/kept_d4.zip > docs/results/s58/select_d4.txt
# goodput's global-batch dip every 16 decisions (cifar10, N = 8, seed 5) and the overlap fit with a memory (experiment)
.venv/bin/python docs/results/s58/goodput_dip.py > docs/results/s58/goodput_dip.txt
.venv/bin/python docs/results/s58/overlap_memory.py 1000 20 base,v1,v2 runs/s58/ovl.json   # overlap_memory.txt
