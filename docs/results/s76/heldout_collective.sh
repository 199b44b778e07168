# session 76: the shipped default's held-out figures (leave-one-out, YOLOv3, ImageNet) in the collective-sync world
# the header (repository root, D, CELLS) is session 75's
source "$(dirname "${BASH_SOURCE[0]}")/../s75/common.sh"
C="--guard off --sync-model collective --cache runs/s76/eval_cache.json --jobs 2"
for W in bert cifar10 deepspeech2 ncf; do     # session 74's leave-one-out draws (runs/s74, docs/results/s74/loo.sh)
  D eval-replay --workloads $W --seeds 20 --seed-offset 5 $CELLS $C --policies-only --oracles goodput \
    --policy=loo_${W}=runs/s74/loo_${W}_mu0_box.zip
done
D eval-replay --workloads benchmarks/heldout_workloads/yolov3 --seeds 20 --seed-offset 5 $CELLS $C --policies-only \
  --oracles goodput --policy=mu0=dynamix_hvd/agent/policies/default.zip
D eval-replay --workloads benchmarks/heldout_workloads/imagenet --seeds 5 --seed-offset 5 $CELLS $C --policies-only \
  --oracles goodput --policy=mu0=dynamix_hvd/agent/policies/default.zip
