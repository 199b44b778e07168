"""The trained DYNAMIX policy as the PPO controller runs it (``controllers.ppo``): the shared-row
network (``net``), the policy file format (``io``), the mapping from an action to proposed batch
sizes (``actions``) and the per-worker history features (``history``). Training, the simulator and
the evaluation live in ``dynamix_hvd.agent``, which imports this package, never the other way.

The shipped policy files stay where training writes them, ``dynamix_hvd/agent/policies/``
(package data)."""
from __future__ import annotations

from pathlib import Path

POLICY_DIR = Path(__file__).resolve().parents[2] / "agent" / "policies"
DEFAULT_POLICY = POLICY_DIR / "default.zip"
