#!/usr/bin/env bash
# Session 68: what one decision costs the job (benchmarks/bench_decision_lag.py) with MPI_Wait
# (cb5db28) and with the yielding wait (1fda9f4), one after the other per configuration.
#   bash docs/results/s68/decision_lag.sh /path/to/checkout-at-cb5db28 > docs/results/s68/decision_lag.txt
set -u
OLD=$1; NEW=$(cd "$(dirname "$0")/../../.." && pwd)
PY=$NEW/.venv/bin/python
for cfg in "2 0 1,2 5" "4 10 0,2 3"; do
  set -- $cfg
  for side in old new; do
    code=$OLD; [ $side = new ] && code=$NEW
    echo "== np $1, sleep-ms $2, lags $3, rounds $4: $side ($code)"
    (cd "$code" && PYTHONPATH=$code mpirun -np $1 --allow-run-as-root --oversubscribe -x PYTHONPATH \
      "$PY" -m mpi4py benchmarks/bench_decision_lag.py --controllers static,goodput,ppo --lags $3 \
      --rounds $4 --steps 300 --sleep-ms $2 2>&1 | grep -v "^\[" | grep -v -i warn)
  done
done
