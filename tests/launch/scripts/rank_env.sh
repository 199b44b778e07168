#!/bin/sh
# Runs "$@" with the assignment in $RANK_ENV (e.g. DYNAMIX_DECISION_LAG=0) exported on one rank only,
# $RANK_ENV_RANK (default 1): one node of the job configured differently from the others.
#   mpirun -np 2 -x RANK_ENV=DYNAMIX_SEED=5 tests/launch/scripts/rank_env.sh python job.py
#   torchrun --no-python --nproc-per-node 2 tests/launch/scripts/rank_env.sh python ddp_job.py
r="${OMPI_COMM_WORLD_RANK:-${HOROVOD_RANK:-${RANK:-0}}}"
if [ "$r" = "${RANK_ENV_RANK:-1}" ]; then export "${RANK_ENV:?set RANK_ENV=NAME=VALUE}"; fi
exec "$@"
