"""Reading policy files: the shipped default's path, a cached loader and the error it raises,
and the text encoding of weights in checkpoints. Used by the PPO controller and online
fine-tuning (kept out of ``controllers/`` so neither imports the other for it)."""
from __future__ import annotations

import base64
import functools
import io
import os
import zipfile
from pathlib import Path
from typing import Any

import torch as th


class PolicyLoadError(RuntimeError):
    """The policy file is missing, corrupt or does not match the observation."""


def default_policy_path() -> Path:
    from dynamix_hvd.agent.policies import DEFAULT_POLICY
    return DEFAULT_POLICY


def load_policy(path: str | os.PathLike | None = None):
    """Load a SharedRowPolicy from an SB3 zip; returns (policy, dynamix_config).

    Loaded policies are cached by (path, modification time): evaluation builds one controller per
    episode and the policy is read-only at inference."""
    p = Path(path) if path is not None else default_policy_path()
    if p.is_file():
        return _load_cached(str(p.resolve()), p.stat().st_mtime_ns, path is None)
    return _load_uncached(p, path is None)


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, is_default: bool):
    return _load_uncached(Path(path), is_default)


def _load_uncached(p: Path, is_default: bool):
    if not p.is_file():
        hint = ("the shipped default policy is missing from the package data; reinstall dynamix_hvd or "
                "train one with `dynamix train-policy --out policy.zip`") if is_default else \
               "train one with `dynamix train-policy --out policy.zip` or omit policy= to use the shipped default"
        raise PolicyLoadError(f"policy file {p} not found: {hint}")
    if not zipfile.is_zipfile(p):
        raise PolicyLoadError(f"policy file {p} is not a stable-baselines3 zip (corrupt or wrong file)")
    try:
        from stable_baselines3 import PPO
        from dynamix_hvd.agent.policy import SharedRowPolicy
        model = PPO.load(p, device="cpu", custom_objects={"learning_rate": 0.0, "lr_schedule": lambda _: 0.0})
    except Exception as exc:  # noqa: BLE001 - any failure here means the file is unusable
        raise PolicyLoadError(f"policy file {p} could not be loaded ({type(exc).__name__}: {exc})") from exc
    policy = model.policy
    if not isinstance(policy, SharedRowPolicy):
        raise PolicyLoadError(f"policy file {p} holds a {type(policy).__name__}, not a DYNAMIX SharedRowPolicy")
    policy.set_training_mode(False)
    return policy, dict(policy.dynamix_config)


def encode_state(obj: Any) -> str:
    """Weights (a state dict of tensors) as base64 text for JSON-able controller state."""
    buf = io.BytesIO()
    th.save(obj, buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_state(text: str) -> Any:
    """``encode_state``'s inverse; tensors only (weights_only=True: no code runs)."""
    return th.load(io.BytesIO(base64.b64decode(text)), map_location="cpu", weights_only=True)
