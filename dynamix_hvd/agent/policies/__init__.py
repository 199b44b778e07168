"""Package data: the shipped default policy (``default.zip``), its training configuration
(``default.json``) and learning curve (``default_curve.csv`` / ``.png``)."""
from __future__ import annotations

from pathlib import Path

POLICY_DIR = Path(__file__).resolve().parent
DEFAULT_POLICY = POLICY_DIR / "default.zip"
