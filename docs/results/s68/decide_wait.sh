#!/usr/bin/env bash
# Session 68: the waiting decision (decision_lag = 0) with MPI_Wait (cb5db28) and with the yielding
# wait (comm.wait_yielding), alternated in rounds, 4 and 2 ranks on this 2-core machine.
#   bash docs/results/s68/decide_wait.sh /path/to/checkout-at-cb5db28 > docs/results/s68/decide_wait.txt
set -u
OLD=$1; NEW=$(cd "$(dirname "$0")/../../.." && pwd)
PY=$NEW/.venv/bin/python
for r in 1 2 3; do
  for np in 4 2; do
    for side in old new; do
      code=$OLD; [ $side = new ] && code=$NEW
      echo "== round $r, $np ranks, $side ($code)"
      (cd "$code" && PYTHONPATH=$code mpirun -np $np --allow-run-as-root --oversubscribe -x PYTHONPATH \
        "$PY" -m mpi4py benchmarks/bench_decide_direct.py --controllers static,goodput,ppo 2>&1 | grep -v -i warn)
    done
  done
done
