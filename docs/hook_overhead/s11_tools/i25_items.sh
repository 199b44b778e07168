#!/bin/bash
# one lock hold: per-item profile (item_cost25.py) before (wt-i25-before) and after (main), np 2
W=${1:-256}; NP=${2:-2}
cd /tmp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI="mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo -np $NP"
for tree in /work/wt-i25-before /work/main; do
  echo "== $tree $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=$tree W=$W STEPS=${STEPS:-400} REPS=1 $MPI /work/main/.venv/bin/python -m mpi4py /work/main/docs/hook_overhead/s11_tools/item_cost25.py 2>&1 | grep -v Warning
done
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
