# session 75: what ablations.sh and ablations_more.sh share (sourced by both): the repository root, the CLI, the
# shipped recipe without its action flags (the split-only ablation drops them), the 24 cells, and one training with its box.
set -e
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
export PYTHONPATH=$PWD
D() { .venv/bin/python -m dynamix_hvd.cli "$@"; }
RECIPE="--world replay --method imitate --dagger-iters 3 --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --history 0"
CELLS="--traces none,job_3_norm,cov:coefficient_variation --workers 8,32"
mkdir -p runs/s75
one() {  # name seed extra-args...
  N=$1; S=$2; shift 2
  D train-policy $RECIPE --seed $S "$@" --out runs/s75/$N.zip > runs/s75/$N.log 2>&1
  D policy-support runs/s75/$N.zip --worlds 24 --large-worlds 24 --box-only --out runs/s75/${N}_box.zip >> runs/s75/$N.log 2>&1
  echo "$N done $(date -u +%T)" >> runs/s75/queue.log
}
