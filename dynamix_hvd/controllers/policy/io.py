"""Reading policy files without unpickling anything; the shipped default's path, a cached loader
and the error it raises. Used by the PPO controller and online fine-tuning (kept out of
``controllers/`` so neither imports the other for it).

A policy file is the stable-baselines3 zip that ``dynamix train-policy`` writes (training and
saving stay plain SB3). ``PPO.load`` would unpickle the ``:serialized:`` (cloudpickle) fields of
its ``data`` member, so it is never called here. Instead (``read_policy_file``):

* ``policy.pth`` (the weights) and ``policy.optimizer.pth`` (Adam's state, for fine-tuning) are
  read with ``torch.load(weights_only=True)``: tensors and plain data only;
* ``data`` is parsed as JSON and only its plain fields are used: ``policy_kwargs`` (``hidden``,
  ``dynamix_config``, ``noop_bias``), the observation shape and action ``nvec``, the PPO
  hyper-parameters. The ``:serialized:`` fields are never decoded; they are only *read* as pickle
  opcodes (``pickletools.genops``, which executes nothing), and a file is refused unless every
  global they name is one of the data classes SB3 writes there (``SB3_DATA_GLOBALS``) and
  ``policy_class`` names ``SharedRowPolicy`` (``POLICY_CLASSES``: where it is or was defined). So a zip that would run
  code when opened with ``PPO.load`` is refused here too;
* ``SharedRowPolicy`` is rebuilt from that JSON configuration and the weights loaded into it.

Any other content (a pickle payload, a foreign policy class, unexpected members or keys) raises
``PolicyLoadError`` naming the file.
"""
from __future__ import annotations

import base64
import functools
import io
import json
import os
import pickletools
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch as th


class PolicyLoadError(RuntimeError):
    """The policy file is missing, corrupt, not plain data or does not match the observation."""


# where SharedRowPolicy is defined, as a policy file names it: files written since session 10 name
# controllers/policy/net.py, older ones (the shipped policies) agent/policy.py, where it lived before
POLICY_CLASSES = (("dynamix_hvd.controllers.policy.net", "SharedRowPolicy"), ("dynamix_hvd.agent.policy", "SharedRowPolicy"))
# every global the ":serialized:" fields of a dynamix SB3 zip name (numpy arrays and scalars,
# gymnasium spaces and their generator, SB3's schedules, buffer class, episode deque); none runs code
SB3_DATA_GLOBALS = frozenset({
    *POLICY_CLASSES, ("collections", "deque"),
    *((m, n) for m in ("numpy._core.numeric", "numpy.core.numeric") for n in ("_frombuffer",)),
    *((m, n) for m in ("numpy._core.multiarray", "numpy.core.multiarray") for n in ("_reconstruct", "scalar")),
    ("numpy", "dtype"), ("numpy", "ndarray"),
    ("gymnasium.spaces.box", "Box"), ("gymnasium.spaces.multi_discrete", "MultiDiscrete"),
    ("gymnasium.spaces.discrete", "Discrete"),
    ("numpy.random._pickle", "__generator_ctor"), ("numpy.random._pickle", "__bit_generator_ctor"),
    ("numpy.random._pcg64", "PCG64"), ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
    ("numpy.random.bit_generator", "SeedSequence"),
    ("stable_baselines3.common.buffers", "RolloutBuffer"),
    ("stable_baselines3.common.utils", "FloatSchedule"), ("stable_baselines3.common.utils", "ConstantSchedule"),
})
MEMBERS = {"data", "policy.pth", "policy.optimizer.pth", "pytorch_variables.pth", "_stable_baselines3_version",
           "system_info.txt"}
POLICY_KWARGS = {"hidden", "dynamix_config", "noop_bias"}
HYPER = ("gamma", "gae_lambda", "ent_coef", "vf_coef", "max_grad_norm", "normalize_advantage", "target_kl",
         "clip_range_vf", "n_steps", "batch_size", "n_epochs", "learning_rate")


def default_policy_path() -> Path:
    from dynamix_hvd.controllers.policy import DEFAULT_POLICY
    return DEFAULT_POLICY


@dataclass(frozen=True)
class PolicyFile:
    """What a policy zip holds, read without unpickling: configuration (plain JSON) and weights."""

    path: Path
    policy_kwargs: dict[str, Any]          # hidden, dynamix_config[, noop_bias]
    n_rows: int                            # rows of the training observation (padded)
    n_features: int                        # per row, incl. the mask column
    nvec: tuple[int, ...]                  # the action space: [n_levels] * n_rows + [n_global]
    hyper: dict[str, Any]                  # PPO hyper-parameters (plain fields of ``data``; clip_range parsed)
    weights: dict[str, th.Tensor]
    optimizer: dict[str, Any] | None

    @property
    def dynamix_config(self) -> dict[str, Any]:
        return dict(self.policy_kwargs.get("dynamix_config") or {})


def pickle_globals(blob: bytes) -> list[tuple[str, str] | None]:
    """The (module, name) of every global a pickle would import, read from its opcodes without
    executing anything; None for a STACK_GLOBAL whose operands are not plain strings."""
    out: list[tuple[str, str] | None] = []
    memo: dict[int, Any] = {}
    recent: list[Any] = []            # values produced by the last opcodes (strings, else None)
    for op, arg, _ in pickletools.genops(blob):
        name = op.name
        if name in ("GLOBAL", "INST"):
            mod, _, attr = str(arg).partition(" ")
            out.append((mod, attr))
            recent.append(None)
        elif name == "STACK_GLOBAL":
            a, b = (recent[-2], recent[-1]) if len(recent) >= 2 else (None, None)
            out.append((a, b) if isinstance(a, str) and isinstance(b, str) else None)
            recent.append(None)
        elif name in ("MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"):
            memo[len(memo) if name == "MEMOIZE" else int(arg)] = recent[-1] if recent else None
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            recent.append(memo.get(int(arg)))
        elif name in ("PROTO", "FRAME", "STOP"):
            continue
        else:
            recent.append(arg if isinstance(arg, str) and ("UNICODE" in name or "STRING" in name) else None)
    return out


def _load_tensors(z: zipfile.ZipFile, member: str, p: Path) -> Any:
    try:
        return th.load(io.BytesIO(z.read(member)), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001
        from dynamix_hvd.checkpoint import refusal_reason
        why = refusal_reason(exc)
        if why is not None:
            raise PolicyLoadError(f"policy file {p} refused: its {member} holds pickled objects other than tensors "
                                  f"and plain data ({why}); dynamix_hvd never unpickles policy files") from exc
        raise PolicyLoadError(f"policy file {p}: {member} is corrupt ({type(exc).__name__}: "
                              f"{str(exc).strip()[:200]})") from exc


def _check_serialized(data: dict[str, Any], p: Path) -> None:
    for key, v in data.items():
        if not (isinstance(v, dict) and ":serialized:" in v):
            continue
        try:
            found = pickle_globals(base64.b64decode(v[":serialized:"], validate=True))
        except Exception as exc:  # noqa: BLE001 - not base64 / not a pickle stream
            raise PolicyLoadError(f"policy file {p}: data field {key!r} is not a valid serialized value "
                                  f"({type(exc).__name__}: {exc})") from exc
        bad = [g for g in found if g not in SB3_DATA_GLOBALS]
        if bad:
            what = "a global the reader cannot resolve" if bad[0] is None else ".".join(bad[0])
            raise PolicyLoadError(f"policy file {p} refused: data field {key!r} holds a pickle naming {what}, "
                                  "which is not data a dynamix policy zip contains (it would run code if "
                                  "unpickled; dynamix_hvd never unpickles policy files)")
        if key == "policy_class" and (len(found) != 1 or found[0] not in POLICY_CLASSES):
            names = [".".join(g) for g in found if g is not None]
            raise PolicyLoadError(f"policy file {p} holds a {', '.join(names) or 'unknown'} policy, not a DYNAMIX "
                                  f"{'.'.join(POLICY_CLASSES[0])}")


def _check_policy_class(data: dict[str, Any], p: Path) -> None:
    """A policy of another class (e.g. SB3's MlpPolicy) is named as such, from the plain
    ``__module__`` field and the class reference in the opcodes (nothing unpickled)."""
    pc = data.get("policy_class")
    mod = pc.get("__module__") if isinstance(pc, dict) else None
    if mod in {m for m, _ in POLICY_CLASSES}:
        return
    try:
        found = pickle_globals(base64.b64decode(pc[":serialized:"], validate=True))
    except Exception:  # noqa: BLE001 - no class reference to name
        found = []
    name = ".".join(found[0]) if len(found) == 1 and found[0] is not None else f"module {mod!r}"
    raise PolicyLoadError(f"policy file {p} holds a {name} policy, not a DYNAMIX SharedRowPolicy "
                          f"({'.'.join(POLICY_CLASSES[0])}); train one with `dynamix train-policy`")


def _ints(text: Any, what: str, p: Path) -> tuple[int, ...]:
    if isinstance(text, list) and all(isinstance(x, int) for x in text):
        return tuple(text)
    if isinstance(text, str) and re.fullmatch(r"\[[\d\s]+\]", text.strip()):
        return tuple(int(x) for x in text.strip()[1:-1].split())
    raise PolicyLoadError(f"policy file {p}: {what} is {text!r}, not a list of integers")


def read_policy_file(path: str | os.PathLike, is_default: bool = False) -> PolicyFile:
    """Configuration and weights of an SB3 policy zip; nothing in the file is unpickled."""
    p = Path(path)
    if not p.is_file():
        hint = ("the shipped default policy is missing from the package data; reinstall dynamix_hvd or "
                "train one with `dynamix train-policy --out policy.zip`") if is_default else \
               "train one with `dynamix train-policy --out policy.zip` or omit policy= to use the shipped default"
        raise PolicyLoadError(f"policy file {p} not found: {hint}")
    if not zipfile.is_zipfile(p):
        raise PolicyLoadError(f"policy file {p} is not a stable-baselines3 zip (corrupt or wrong file)")
    try:
        with zipfile.ZipFile(p) as z:
            names = set(z.namelist())
            if not {"data", "policy.pth"} <= names:
                raise PolicyLoadError(f"policy file {p} is not a stable-baselines3 zip: members {sorted(names)} lack "
                                      "'data' and 'policy.pth'")
            if names - MEMBERS:
                raise PolicyLoadError(f"policy file {p} refused: unexpected members {sorted(names - MEMBERS)} "
                                      f"(a policy zip holds only {sorted(MEMBERS)})")
            try:
                data = json.loads(z.read("data").decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                raise PolicyLoadError(f"policy file {p} refused: its 'data' member is not JSON ({exc})") from exc
            if not isinstance(data, dict):
                raise PolicyLoadError(f"policy file {p}: 'data' is a JSON {type(data).__name__}, not an object")
            _check_policy_class(data, p)
            _check_serialized(data, p)
            weights = _load_tensors(z, "policy.pth", p)
            optimizer = _load_tensors(z, "policy.optimizer.pth", p) if "policy.optimizer.pth" in names else None
            if "pytorch_variables.pth" in names:
                _load_tensors(z, "pytorch_variables.pth", p)       # PPO writes {}; read only to refuse payloads
    except (zipfile.BadZipFile, OSError) as exc:
        raise PolicyLoadError(f"policy file {p} is not a readable zip ({exc})") from exc
    if not isinstance(weights, dict) or not all(isinstance(v, th.Tensor) for v in weights.values()):
        raise PolicyLoadError(f"policy file {p}: policy.pth is not a state dict of tensors")
    kwargs = data.get("policy_kwargs")
    if not isinstance(kwargs, dict) or not isinstance(kwargs.get("dynamix_config"), dict) or set(kwargs) - POLICY_KWARGS:
        raise PolicyLoadError(f"policy file {p}: policy_kwargs {sorted(kwargs) if isinstance(kwargs, dict) else kwargs!r}"
                              f" must be a subset of {sorted(POLICY_KWARGS)} with a dynamix_config object")
    shape = _ints(data.get("observation_space", {}).get("_shape"), "observation_space._shape", p)
    nvec = _ints(data.get("action_space", {}).get("nvec"), "action_space.nvec", p)
    if len(shape) != 2 or len(nvec) != shape[0] + 1:
        raise PolicyLoadError(f"policy file {p}: observation shape {shape} and action nvec of length {len(nvec)} "
                              "are not (rows, features) and rows + 1")
    hyper = {k: data[k] for k in HYPER if k in data}
    m = re.fullmatch(r"ConstantSchedule\(val=([-+0-9.eE]+)\)", str(data.get("clip_range", {}).get("value_schedule", "")))
    if m:
        hyper["clip_range"] = float(m.group(1))
    return PolicyFile(p, dict(kwargs), shape[0], shape[1], nvec, hyper, dict(weights),
                      optimizer if isinstance(optimizer, dict) else None)


def policy_spaces(n_rows: int, n_features: int, n_levels: int, n_global: int) -> tuple[Any, Any]:
    """The observation and action spaces of a SharedRowPolicy for ``n_rows`` rows."""
    import gymnasium as gym
    import numpy as np
    from dynamix_hvd.controllers.policy.net import OBS_LIMIT
    obs = gym.spaces.Box(-OBS_LIMIT, OBS_LIMIT, shape=(n_rows, n_features), dtype=np.float32)
    act = gym.spaces.MultiDiscrete([n_levels] * n_rows + [n_global])
    return obs, act


def build_policy(pf: PolicyFile) -> Any:
    """A ``SharedRowPolicy`` rebuilt from the file's JSON configuration, holding its weights
    (inference mode)."""
    from stable_baselines3.common.utils import ConstantSchedule
    from dynamix_hvd.controllers.policy.net import SharedRowPolicy
    obs, act = policy_spaces(pf.n_rows, pf.n_features, pf.nvec[0], pf.nvec[-1])
    try:
        policy = SharedRowPolicy(obs, act, ConstantSchedule(0.0), **pf.policy_kwargs)
        policy.load_state_dict(pf.weights, strict=True)
    except Exception as exc:  # noqa: BLE001 - shapes / keys do not match the configuration
        raise PolicyLoadError(f"policy file {pf.path}: weights do not fit the policy its configuration describes "
                              f"({type(exc).__name__}: {str(exc)[:300]})") from exc
    policy.set_training_mode(False)
    return policy


def load_policy(path: str | os.PathLike | None = None):
    """Load a SharedRowPolicy from an SB3 zip without unpickling; returns (policy, dynamix_config).

    Loaded policies are cached by (path, modification time): evaluation builds one controller per
    episode and the policy is read-only at inference."""
    p = Path(path) if path is not None else default_policy_path()
    if p.is_file():
        return _load_cached(str(p.resolve()), p.stat().st_mtime_ns, path is None)
    return _load_uncached(p, path is None)


@functools.lru_cache(maxsize=16)    # an evaluation's policies, ensembles' members included
def _load_cached(path: str, mtime_ns: int, is_default: bool):
    return _load_uncached(Path(path), is_default)


def _load_uncached(p: Path, is_default: bool):
    pf = read_policy_file(p, is_default)
    policy = build_policy(pf)
    return policy, dict(policy.dynamix_config)


def encode_state(obj: Any) -> str:
    """Weights (a state dict of tensors) as base64 text (``finetune.format`` 1 checkpoints)."""
    buf = io.BytesIO()
    th.save(obj, buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_state(text: str) -> Any:
    """``encode_state``'s inverse; tensors only (weights_only=True: no code runs)."""
    try:
        return th.load(io.BytesIO(base64.b64decode(text)), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001
        from dynamix_hvd.checkpoint import refusal_reason
        raise PolicyLoadError(f"fine-tuned policy weights in controller state refused: "
                              f"{refusal_reason(exc) or type(exc).__name__ + ': ' + str(exc)[:200]}") from exc
