#!/bin/bash
# one lock hold: bench_hook_overhead before (wt-i25-before) and after (main), same np/width
NP=$1; W=$2; R=${3:-3}
cd /work/main
echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) np $NP width $W"
echo "-- before"
PYTHONPATH=/work/wt-i25-before .venv/bin/python /work/wt-i25-before/benchmarks/bench_hook_overhead.py --np $NP --widths $W --rounds $R 2>&1 | grep -v reproduce
echo "-- after"
PYTHONPATH=/work/main .venv/bin/python benchmarks/bench_hook_overhead.py --np $NP --widths $W --rounds $R 2>&1 | grep -v reproduce
echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
