# session 76: the shipped recipe (mem_use_s0's command) trained in the collective-sync world, two seeds, each with its box
# the header (repository root, D, RECIPE without its action flags, CELLS) is session 75's
source "$(dirname "${BASH_SOURCE[0]}")/../s75/common.sh"
RECIPE="$RECIPE --disable system,network --enable mem_use --pass-action --pass-only"
mkdir -p runs/s76
one() {  # seed
  D train-policy $RECIPE --sync-model collective --seed $1 --out runs/s76/coll_s$1.zip > runs/s76/coll_s$1.log 2>&1
  D policy-support runs/s76/coll_s$1.zip --worlds 24 --large-worlds 24 --box-only --out runs/s76/coll_s$1_box.zip >> runs/s76/coll_s$1.log 2>&1
  echo "coll_s$1 done $(date -u +%T)" >> runs/s76/queue.log
}
for s in "$@"; do one $s & done
wait
