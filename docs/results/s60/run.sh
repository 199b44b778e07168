#!/bin/bash
# Session 60: what one decision costs the job, waiting (decision_lag 0) vs in rank 0's thread (decision_lag 1).
# Each command alone on the 2-core machine (no other job), in this order.
cd "$(dirname "$0")/../../.."
MPI="mpirun --allow-run-as-root --oversubscribe"
( for cfg in "2 10 5" "4 10 3" "4 0 3" "2 0 3"; do set -- $cfg
  echo "== np $1, sleep-ms $2"
  $MPI -np $1 .venv/bin/python -m mpi4py benchmarks/bench_decision_lag.py --controllers static,goodput,ppo --lags 0,1 \
      --rounds $3 --steps 300 --sleep-ms $2 2>&1 | grep -v "^\["
done ) > docs/results/s60/decision_lag.txt
( for np in 2 4; do $MPI -np $np .venv/bin/python -m mpi4py benchmarks/bench_decide_direct.py --controllers static,goodput,ppo; done ) \
    > docs/results/s60/decide_direct.txt 2>&1
