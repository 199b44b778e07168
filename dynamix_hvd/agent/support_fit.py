"""``dynamix policy-support``: record a policy's training support in its file.

The support (``controllers.policy.support``) is the box of the observations the policy meets in
the worlds it was trained in. ``fit_policy_support`` rolls the policy out as it was trained (support,
refuted-departure guard and warm-up off) on ``worlds`` worlds drawn as its training drew them (its
``dynamix_config``: workloads, trace families, world sizes, perturbations, noise-scale model;
``replay.worlds.WorldDraw.from_config``, from a seed of its own; ``large_worlds`` more from the upper half of
its world sizes) and fits the box of every observation it acted on; ``write_support`` writes a copy of
the policy file with the box in its ``dynamix_config``. ``train-policy --method imitate`` records
it from its DAgger aggregate directly (``imitate.train_imitation``).

    dynamix policy-support runs/s32/loo_ncf.zip --worlds 24 --out runs/s34/loo_ncf_sup.zip
"""
from __future__ import annotations

import argparse
import json
import math
import os
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from dynamix_hvd.controllers.policy.support import RADIUS_QUANTILE, Support, fit


def observation_columns(cfg: dict[str, Any]) -> tuple[str, ...]:
    """The names of a policy's observation columns (``state.FEATURE_NAMES``, then its history's)."""
    from dynamix_hvd.controllers.policy.history import N_HISTORY
    from dynamix_hvd.state import FEATURE_NAMES
    return tuple(FEATURE_NAMES) + (tuple(f"history_{i}" for i in range(N_HISTORY)) if cfg.get("history") else ())


def global_columns() -> tuple[int, ...]:
    """The observation columns of the global features (``state.GLOBAL_FEATURES``)."""
    from dynamix_hvd.state import N_FEATURES, N_LOCAL
    return tuple(range(N_LOCAL, N_FEATURES))


def training_world_specs(cfg: dict[str, Any], worlds: int, large_worlds: int = 0, seed: int = 0) -> list[Any]:
    """The ``WorldSpec`` of ``worlds`` worlds drawn as a policy with ``dynamix_config`` ``cfg`` was
    trained (``replay.worlds.WorldDraw.from_config``, from a seed of their own), then ``large_worlds`` more
    whose N is drawn from the upper half (in log) of its training range."""
    from dynamix_hvd.replay.worlds import WorldDraw
    rng, rng_large = np.random.default_rng([seed, 7117]), np.random.default_rng([seed, 7118])
    draw = WorldDraw.from_config(cfg)
    lo, hi = draw.n_range
    large = replace(draw, n_range=(max(lo, int(round(math.sqrt(lo * hi)))), hi))
    return [draw.draw(rng) for _ in range(worlds)] + [large.draw(rng_large) for _ in range(large_worlds)]


def fit_policy_support(path: str | os.PathLike, worlds: int = 24, seed: int = 0,
                       max_decisions: int = 2000, radius_quantile: float = RADIUS_QUANTILE,
                       large_worlds: int = 0, near: bool = True) -> Support:
    """The support of the observations policy ``path`` acts on in ``worlds`` of its training worlds,
    and in ``large_worlds`` more whose N is drawn from the upper half (in log) of its training range
    (N log-uniform over the whole range rarely draws the largest worlds it was trained on).
    ``near=False``: the box alone, without the nearest-neighbour test on the global features."""
    from dynamix_hvd.controllers.policy.io import load_policy
    from dynamix_hvd.controllers.ppo import PPOController
    from dynamix_hvd.replay.runner import run_controller
    from dynamix_hvd.replay.worlds import build_sim
    _, cfg = load_policy(path)
    if worlds < 1:
        raise ValueError(f"worlds={worlds}: must be >= 1")
    if large_worlds < 0:
        raise ValueError(f"large_worlds={large_worlds}: must be >= 0")
    obs: list[np.ndarray] = []
    for spec in training_world_specs(cfg, worlds, large_worlds, seed):
        sim = build_sim(spec)
        # the policy as it was trained: no support, no refuted-departure guard, no warm-up (they ride on
        # top of it live; with them the rollouts, and so the recorded support, depend on the guards)
        ctl = PPOController(sim.bounds(), sim.base_batch, policy=path, support=False, refute=0, warmup=0)
        act = ctl.act

        def recording_act(o: np.ndarray, act=act) -> tuple[np.ndarray, int]:
            obs.append(np.array(o, dtype=float))
            return act(o)
        ctl.act = recording_act          # type: ignore[method-assign]
        run_controller(sim, "ppo", spec.seed, max_decisions, controller=ctl)
    return fit(obs, observation_columns(cfg), global_columns() if near else (), seed, radius_quantile=radius_quantile)


def write_support(src: str | os.PathLike, support: Support, out: str | os.PathLike) -> Path:
    """A copy of policy file ``src`` with ``support`` in its ``dynamix_config`` (the JSON 'data'
    member rewritten; weights copied byte for byte), written atomically to ``out``."""
    from dynamix_hvd.controllers.policy.io import read_policy_file
    read_policy_file(Path(src), False)               # refuses a file the loader would refuse
    dst = Path(out)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
            for info in zin.infolist():
                blob = zin.read(info.filename)
                if info.filename == "data":
                    data = json.loads(blob.decode("utf-8"))
                    data["policy_kwargs"]["dynamix_config"]["support"] = support.to_dict()
                    blob = json.dumps(data, separators=(",", ":")).encode("utf-8")
                zout.writestr(info, blob)
        os.replace(tmp, dst)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dst


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("policy", help="policy zip (SB3 format, as train-policy writes)")
    p.add_argument("--out", required=True, help="the copy with the support recorded (may equal POLICY)")
    p.add_argument("--worlds", type=int, default=24, help="training worlds to roll the policy out on")
    p.add_argument("--seed", type=int, default=0, help="seed of the world draws")
    p.add_argument("--max-decisions", type=int, default=2000, help="per world, at most")
    p.add_argument("--large-worlds", type=int, default=0,
                   help="more worlds with N from the upper half (in log) of the training range")
    p.add_argument("--radius-quantile", type=float, default=RADIUS_QUANTILE,
                   help="the radius: this quantile of the decisions' nearest-neighbour distances")
    p.add_argument("--box-only", action="store_true",
                   help="record the box of every observation column alone, without the nearest-neighbour "
                        "test on the global features (the shipped default's support since session 53)")


def run(args: argparse.Namespace) -> int:
    from dynamix_hvd.controllers.policy.io import PolicyLoadError
    try:
        sup = fit_policy_support(args.policy, args.worlds, args.seed, args.max_decisions, args.radius_quantile,
                                 args.large_worlds, near=not args.box_only)
    except (ValueError, OSError, PolicyLoadError) as exc:
        print(f"dynamix policy-support: {exc}")
        return 2
    write_support(args.policy, sup, args.out)
    extra = f" (+ {args.large_worlds} with N in the upper half of its range)" if args.large_worlds else ""
    extra += ", the box alone" if args.box_only else ""
    print(f"support of {args.policy} over {sup.rows} observations in {args.worlds} worlds{extra} -> {args.out}")
    return 0
