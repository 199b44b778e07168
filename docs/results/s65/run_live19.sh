#!/bin/bash
# Session 65: issue 19's three live scenarios on the final code (the guard's revert and the fallback of
# ppo to goodput): goodput and ppo, 3 paired repeats each (static's accuracy: session 62); then the fallbacks counted per run.
set -e
for S in hetero4x node_slowdown link_degrade; do
  dynamix bench --scenario $S --controllers goodput,ppo --repeats 3 --out runs/s65/live19_$S > runs/s65/live19_$S.txt
  for d in runs/s65/live19_$S/*/; do echo "$d fallbacks: $(grep -c '"fallback"' $d/events.jsonl)"; done >> runs/s65/live19_$S.txt
done
