# session 76: the shipped recipe (mem_use_s0's command) trained in the collective-sync world, two seeds, each with its box
set -e
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
export PYTHONPATH=$PWD
D() { .venv/bin/python -m dynamix_hvd.cli "$@"; }
RECIPE="--world replay --method imitate --disable system,network --enable mem_use --history 0 --dagger-iters 3 --worlds-per-iter 20 --epochs 20 --horizon 20 --threads 1 --pass-hold --balance worlds --pass-action --pass-only"
mkdir -p runs/s76
one() {  # seed
  D train-policy $RECIPE --sync-model collective --seed $1 --out runs/s76/coll_s$1.zip > runs/s76/coll_s$1.log 2>&1
  D policy-support runs/s76/coll_s$1.zip --worlds 24 --large-worlds 24 --box-only --out runs/s76/coll_s$1_box.zip >> runs/s76/coll_s$1.log 2>&1
  echo "coll_s$1 done $(date -u +%T)" >> runs/s76/queue.log
}
for s in "$@"; do one $s & done
wait
