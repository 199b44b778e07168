#!/usr/bin/env bash
# The main job (`make demo`): static vs the best available controller on an emulated
# heterogeneous 4-rank cluster (network namespaces + tc where permitted, else network-free),
# real Horovod training on MNIST-1D; prints the results table and writes runs/demo/report.png.
# Run scripts/setup_env.sh first (make demo does). Extra arguments go to `dynamix demo`,
# e.g. scripts/demo.sh --no-netns --max-time-s 40
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DYNAMIX_VENV:-$REPO/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "demo: no virtual environment at $VENV; run scripts/setup_env.sh (or make setup) first" >&2
  exit 2
fi
export PATH="$VENV/bin:$PATH"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd "$REPO"
exec "$VENV/bin/python" -m dynamix_hvd.cli demo "$@"
