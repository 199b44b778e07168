"""Package data: the shipped default policy (``default.zip``: the imitation policy ``mem_use_s0.zip``, seed 0
of the recipe whose one global action beyond the fixed scales passes the safety layer's noise-scale hold and whose
one system column is the rank's memory use, with the box of its training support recorded over 24 worlds and 24
more of 11-64 ranks; chosen in session 73 among the recipe's three draws by ``dynamix select-policy``, adopted in
session 74) and how it was made (``default.json``); the previous defaults stay loadable for comparison
(``default_s56.zip``: ``pass_only_s0.zip``, the same recipe without the memory-use column, with its box, sessions
56-73; ``default_s53.zip``: seed 1 of that recipe, ``pass_only_s1.zip``, with its box, sessions 53-55;
``default_s52.zip``: that policy with the support's nearest-neighbour test too, session 52;
``default_s44.zip``: the imitation policy ``imitate_h20.zip`` with its support, sessions 44-51;
``default_s35.zip``: the same policy with the support of sessions 35-43, whose largest world had 54 ranks;
``replay_residual.zip``: session 11's replay-trained residual, with its configuration and learning curve;
``sim_anchored.zip``: the simulator-trained one). The
paths are defined next to the code that reads them (``controllers.policy``)."""
from __future__ import annotations

from dynamix_hvd.controllers.policy import DEFAULT_POLICY, POLICY_DIR

__all__ = ["DEFAULT_POLICY", "POLICY_DIR"]
