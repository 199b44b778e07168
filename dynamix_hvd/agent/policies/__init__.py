"""Package data: the shipped default policy (``default.zip``), its training configuration
(``default.json``) and learning curve (``default_curve.csv`` / ``.png``); the paths are defined
next to the code that reads them (``controllers.policy``)."""
from __future__ import annotations

from dynamix_hvd.controllers.policy import DEFAULT_POLICY, POLICY_DIR

__all__ = ["DEFAULT_POLICY", "POLICY_DIR"]
