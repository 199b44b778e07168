#!/bin/bash
# Rank 1 out of step, under the package at $1 (a checkout; default this one): it takes its next
# batch without optimizer.step() for step 7's ("skip"), or leaves epoch 0 after step 50 and begins
# epoch 1 alone ("break"). Horovod engine (mpirun -np 2, static and goodput) and the DDP engine
# (torchrun, 2 workers, skip). Prints how each job ended and when, from the job's FAULT-AT line.
#   bash docs/results/s72/skip_step.sh [CHECKOUT] [TIMEOUT_S]
set -u
cd "$(dirname "$0")/../../.."
PKG=${1:-$PWD}; LIMIT=${2:-90}
PY=.venv/bin/python
run() {   # label, command...
  local label=$1; shift
  local out; out=$(mktemp)
  local t0; t0=$(date +%s.%N)
  PYTHONPATH=$PKG timeout "$LIMIT" "$@" > "$out" 2>&1; local rc=$?
  local t1; t1=$(date +%s.%N)
  local fault; fault=$(grep -o "FAULT-AT [0-9.]*" "$out" | head -1 | cut -d' ' -f2)
  local ended="$(python3 -c "print(f'{$t1 - ${fault:-$t0}:.1f}')")"
  if [ $rc = 124 ]; then how="HUNG: killed after $LIMIT s"; else how="exit $rc, ended $ended s after the skip"; fi
  echo "$label: $how"
  grep -oE "(failed with [A-Za-z]+Error: .{0,150})|(stall watchdog on rank 0 of 2: .{0,220})|final test accuracy.*|FINISHED.*" "$out" | sort -u | head -3 | sed 's/^/    /'
  rm -f "$out"
}
for c in static goodput; do
  run "horovod engine, $c, skip" mpirun --allow-run-as-root --oversubscribe -np 2 -x PYTHONPATH $PY \
      tests/launch/scripts/hook_job.py --skip-at-step 7 --epochs 2 --controller $c
  run "horovod engine, $c, break" mpirun --allow-run-as-root --oversubscribe -np 2 -x PYTHONPATH $PY \
      tests/launch/scripts/hook_job.py --break-at-step 50 --epochs 2 --controller $c
done
run "ddp engine, static, skip" .venv/bin/torchrun --standalone --nproc-per-node 2 tests/launch/scripts/ddp_job.py \
    --mode train --epochs 2 --die-at-step 7 --die-mode skip
