#!/bin/bash
# Session 61: the decision's messages travelling during steps (decision_lag 2, 3) against session 60's
# lag 1 and the waiting decision (0). Each command alone on the 2-core machine, in this order.
cd "$(dirname "$0")/../../.."
MPI="mpirun --allow-run-as-root --oversubscribe"
( for cfg in "4 10 3" "2 10 3" "4 0 3" "2 0 3"; do set -- $cfg
  echo "== np $1, sleep-ms $2"
  $MPI -np $1 .venv/bin/python -m mpi4py benchmarks/bench_decision_lag.py --controllers static,goodput,ppo --lags 0,1,2,3 \
      --rounds $3 --steps 300 --sleep-ms $2 2>&1 | grep -v "^\["
done ) > docs/results/s61/decision_lag.txt
# the DDP engine under torchrun (decision_lag_ddp.txt)
( for np in 4 2; do echo "== np $np, sleep-ms 10"
  .venv/bin/torchrun --standalone --nproc-per-node $np benchmarks/bench_decision_lag.py --engine ddp \
      --controllers static,goodput,ppo --lags 0,1,2,3 --rounds 3 --steps 300 --sleep-ms 10 2>&1 | grep -v "^\[\|^W[0-9]"
done ) > docs/results/s61/decision_lag_ddp.txt 2>&1
# against plain Horovod: lag 2 (the new default) vs lag 1 (hook_overhead_lag.txt)
.venv/bin/python benchmarks/bench_hook_overhead.py --np 2,4 --widths 256 --device-ms 10 --rounds 5 \
    --variants "hook,decision_lag=1,goodput min_decision_s=0,goodput min_decision_s=0 decision_lag=1" \
    > docs/results/s61/hook_overhead_lag.txt 2>&1
# live on the emulated cluster with the new default (decision_lag 2), 3 repeats each (live_<scenario>.txt)
for sc in hetero4x node_slowdown link_degrade; do
  .venv/bin/python -m dynamix_hvd.cli bench --scenario $sc --controllers static,goodput,ppo --repeats 3 \
      --out runs/s61/live/$sc > docs/results/s61/live_$sc.txt 2>&1
done
# hetero4x again with 5 repeats (the 3-repeat run read ppo / goodput 1.05x with the same plans: live5_hetero4x.txt)
.venv/bin/python -m dynamix_hvd.cli bench --scenario hetero4x --controllers static,goodput,ppo --repeats 5 \
    --out runs/s61/live5/hetero4x > docs/results/s61/live5_hetero4x.txt 2>&1
# why the blocking decision is slow at 4 ranks on 2 cores: the bare transport with and without Horovod (bare_gather.txt)
for h in 0 1; do for w in 0 30000; do $MPI -np 4 .venv/bin/python docs/results/s61/bare_gather.py $h $w 2>&1 | grep p50; done; done
for env in HOROVOD_CYCLE_TIME=1 HOROVOD_CYCLE_TIME=5 HOROVOD_CYCLE_TIME=20 OMPI_MCA_mpi_yield_when_idle=1; do
  $MPI -np 4 -x $env .venv/bin/python docs/results/s61/bare_gather.py 1 0 2>&1 | grep p50; done
for m in ag ar; do $MPI -np 4 .venv/bin/python docs/results/s61/bare_hvd_ops.py $m 2>&1 | grep p50; done
# the CPU-only cells again, lags 1 and 2, 5 rounds (decision_lag_cpu5.txt)
( for np in 2 4; do echo "== np $np, sleep-ms 0, lags 1,2, 5 rounds"
  $MPI -np $np .venv/bin/python -m mpi4py benchmarks/bench_decision_lag.py --controllers static,goodput,ppo --lags 1,2 \
      --rounds 5 --steps 300 --sleep-ms 0 2>&1 | grep -v "^\["
done ) > docs/results/s61/decision_lag_cpu5.txt 2>&1
