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
# against plain Horovod, waiting vs lagged (hook_overhead_lag.txt)
.venv/bin/python benchmarks/bench_hook_overhead.py --np 2,4 --widths 256 --device-ms 10 --rounds 5 \
    --variants "hook,decision_lag=0,min_decision_s=0,min_decision_s=0 decision_lag=0,goodput min_decision_s=0,goodput min_decision_s=0 decision_lag=0" \
    > docs/results/s60/hook_overhead_lag.txt 2>&1
# live on the emulated cluster with the new default (decision_lag 1), 3 repeats each (live_<scenario>.txt)
for sc in hetero4x node_slowdown link_degrade; do
  .venv/bin/python -m dynamix_hvd.cli bench --scenario $sc --controllers static,goodput,ppo --repeats 3 \
      --out runs/s60/live/$sc > docs/results/s60/live_$sc.txt 2>&1
done
