#!/bin/bash
# session 75: the issue's ablations re-run on the shipped default's recipe (session 73's memory-use recipe, mu):
# without the statistical features (--disable ...,statistical) and split only (--global-scales 1.0: no global
# action, so no pass either), training seeds 0 and 1, two at a time; each with its box; then the 24 shipped
# cells x test seeds 5-44 against the recipe's own draws of the same seeds (mu_s0 = the shipped default's
# policy, mu_s1), paired per cell. Writes runs/s75/ and prints the paired table.
source "$(dirname "$0")/common.sh"
# the full recipe's draws: seed 0 is the shipped policy (mem_use_s0.zip), seed 1 session 73's mu_s1
# (session 73 trained mu_s1 with this very command: reused when runs/s73 still holds it)
if [ -f runs/s73/mu_s1_box.zip ]; then cp runs/s73/mu_s1_box.zip runs/s75/mu_s1_box.zip; fi
[ -f runs/s75/mu_s1_box.zip ] || one mu_s1 1 --disable system,network --enable mem_use --pass-action --pass-only
( one nostat_s0 0 --disable system,network,statistical --enable mem_use --pass-action --pass-only
  one split_s0 0 --disable system,network --enable mem_use --global-scales 1.0 ) &
( one nostat_s1 1 --disable system,network,statistical --enable mem_use --pass-action --pass-only
  one split_s1 1 --disable system,network --enable mem_use --global-scales 1.0 ) &
wait
D eval-replay --seeds 40 --seed-offset 5 --jobs 2 --guard off --cache runs/s75/eval_cache.json $CELLS --policies-only \
  --oracles goodput --policy=full0=dynamix_hvd/agent/policies/default.zip --policy=full1=runs/s75/mu_s1_box.zip \
  --policy=nostat0=runs/s75/nostat_s0_box.zip --policy=nostat1=runs/s75/nostat_s1_box.zip \
  --policy=split0=runs/s75/split_s0_box.zip --policy=split1=runs/s75/split_s1_box.zip \
  --out runs/s75/eval_abl.json > runs/s75/eval_abl.txt 2>&1
echo "eval done $(date -u +%T)" >> runs/s75/queue.log
# paired: each ablation draw / the full recipe's draw of the same training seed
for a in nostat split; do for s in 0 1; do
  full=$([ $s = 0 ] && echo dynamix_hvd/agent/policies/default.zip || echo runs/s75/mu_s1_box.zip)
  ha=$(sha1sum runs/s75/${a}_s${s}_box.zip | cut -c1-12); hf=$(sha1sum $full | cut -c1-12)   # eval-replay's cache labels
  echo "== ${a}_s$s / full_s$s"
  .venv/bin/python benchmarks/compare_eval_caches.py runs/s75/eval_cache.json runs/s75/eval_cache.json \
    --controller "ppo#$hf?refute=2&warmup=16" --controller-b "ppo#$ha?refute=2&warmup=16" | tail -3
done; done
