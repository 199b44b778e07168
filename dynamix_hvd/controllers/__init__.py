"""Batch-size controllers behind one interface (see base.Controller)."""
from __future__ import annotations

import importlib
from typing import Any

from dynamix_hvd.controllers.base import Controller
from dynamix_hvd.plan import PlanBounds

# name -> "module:Class"; modules are imported lazily so that e.g. the PPO controller's
# stable-baselines3 import is only paid when it is used.
REGISTRY: dict[str, str] = {
    "static": "dynamix_hvd.controllers.static:StaticController",
    "oracle": "dynamix_hvd.controllers.oracle:OracleController",
    "proportional": "dynamix_hvd.controllers.proportional:ProportionalController",
    "goodput": "dynamix_hvd.controllers.goodput:GoodputController",
    "adaptdl": "dynamix_hvd.controllers.adaptdl_ctl:AdaptDLController",
    "random": "dynamix_hvd.controllers.random_ctl:RandomController",
    "ppo": "dynamix_hvd.controllers.ppo:PPOController",
}


# the built-in controllers whose ``uses_noise_scale`` is True (by name, so that resolving the
# config's ``gns = auto`` on every rank imports no controller module; a test checks the classes)
NOISE_SCALE_READERS = frozenset({"goodput", "ppo", "adaptdl"})


def uses_noise_scale(controller: str | Controller) -> bool:
    """Does this controller (a registry name or an object) read the gradient noise scale?"""
    if isinstance(controller, str):
        return controller in NOISE_SCALE_READERS
    return bool(getattr(controller, "uses_noise_scale", True))


def controller_class(name: str) -> type[Controller]:
    """The class of a registered controller (its module imported); unknown names raise ValueError
    listing the known ones."""
    if name not in REGISTRY:
        raise ValueError(f"unknown controller {name!r}; choose one of {sorted(REGISTRY)}")
    module_name, cls_name = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module_name), cls_name)


def make_controller(name: str, bounds: PlanBounds, base_batch: int, **kwargs: Any) -> Controller:
    """Build a controller by name; unknown names raise ValueError listing the known ones."""
    return controller_class(name)(bounds, base_batch, **kwargs)


__all__ = ["Controller", "REGISTRY", "controller_class", "NOISE_SCALE_READERS", "make_controller", "uses_noise_scale"]
