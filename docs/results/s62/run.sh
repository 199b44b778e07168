#!/bin/bash
# Session 62: the Horovod engine's travelling rows and plan over MPI_Igather / MPI_Ibcast (mpi4py) instead of
# Horovod's allgather / broadcast ops. Each command alone on the 2-core machine, in this order.
cd "$(dirname "$0")/../../.."
MPI="mpirun --allow-run-as-root --oversubscribe"
# does a small Igather complete while the rank makes no MPI call for 5 ms (with / without Horovod)? (igather_progress.txt)
( for h in 0 1; do for np in 2 4; do $MPI -np $np .venv/bin/python docs/results/s62/igather_progress.py $h 2>&1 | grep completed; done; done ) \
    > docs/results/s62/igather_progress.txt
# what one decision costs the job, as session 61's decision_lag.txt (decision_lag.txt)
( for cfg in "4 10 3" "2 10 3" "2 0 5"; do set -- $cfg
  echo "== np $1, sleep-ms $2"
  $MPI -np $1 .venv/bin/python -m mpi4py benchmarks/bench_decision_lag.py --controllers static,goodput,ppo --lags 0,1,2,3 \
      --rounds $3 --steps 300 --sleep-ms $2 2>&1 | grep -v "^\["
done ) > docs/results/s62/decision_lag.txt
# against plain Horovod with the defaults (hook_overhead.txt)
.venv/bin/python benchmarks/bench_hook_overhead.py --np 2,4 --widths 256 --device-ms 10 --rounds 5 \
    --variants "hook,decision_lag=1,goodput min_decision_s=0,goodput min_decision_s=0 decision_lag=1" \
    > docs/results/s62/hook_overhead.txt 2>&1
# dynamix replay on 31 novel inputs (3 seeds), and the cells at or above 1.03x there again with 20 seeds
.venv/bin/python benchmarks/novel_inputs.py > docs/results/s62/novel_inputs.txt
for c in cifar_2val cifar_gradzero cifar_scalonly cov_ragged; do
  .venv/bin/python benchmarks/novel_inputs.py --only $c --seeds 20 | grep "^| $c"; done > docs/results/s62/novel_inputs_20seeds.txt
# live on the emulated cluster with the MPI transport (default decision_lag 2), 3 repeats each (live_<scenario>.txt)
for sc in hetero4x node_slowdown link_degrade; do
  .venv/bin/python -m dynamix_hvd.cli bench --scenario $sc --controllers static,goodput,ppo --repeats 3 \
      --out runs/s62/live/$sc > docs/results/s62/live_$sc.txt 2>&1
done
