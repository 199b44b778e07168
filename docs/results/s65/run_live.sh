#!/bin/bash
# Session 65: hetero4x_adascale after the guard's revert fix (commit 23bdcac).
set -e
# 5 paired repeats: the figures of the README (live_h4a_r5.txt)
dynamix bench --scenario hetero4x_adascale --controllers static,proportional,goodput,ppo --repeats 5 --out runs/s65/h4a_r5
# 3 repeats with the refute guard closing after one refutation (live_h4a_revert_refute.txt)
dynamix bench --scenario hetero4x_adascale --controllers 'goodput,proportional,ppo,ppo?refute=1' --repeats 3 --out runs/s65/h4a_revert
# 3 repeats after the guard's fallback for ppo became goodput (live_h4a_chain.txt)
dynamix bench --scenario hetero4x_adascale --controllers goodput,ppo --repeats 3 --out runs/s65/h4a_chain
