"""The PPO controller's options as one spec string writes them, for every command that names a
controller in text: ``trust=0.05&refute=1&passguard=on`` -> keyword arguments of ``PPOController``.

``dynamix replay`` / ``eval-replay`` write them after a policy file (``ppo:PATH?OPTS``), ``dynamix
bench`` after ``ppo`` or ``ppo=PATH`` (``ppo?OPTS``, ``ppo=PATH?OPTS``). Pure; a bad option raises
ValueError naming the spec, the key and the value."""
from __future__ import annotations

from typing import Any

ON_OFF = {"passguard": "guard_pass", "support": "support"}   # option -> keyword, value on / off
INTEGERS = ("refute", "warmup")                            # >= 0
NUMBERS = ("trust", "margin")
KNOWN = ("trust", "margin", "ensemble", "support", "refute", "warmup", "passguard", "fallback")


def ppo_options(opts: str, spec: str) -> dict[str, Any]:
    """``PPOController`` keyword arguments of ``opts`` (``key=value`` pairs joined by ``&``; "" -> {}).

    ``trust=X`` / ``margin=X`` (numbers), ``ensemble=RULE``, ``support=on|off`` (off: ignore the
    policy's recorded training support), ``refute=K`` (0: repeat departures goodput undid),
    ``warmup=K`` (no departure in the first K decisions), ``passguard=on|off`` (the warm-up and refute
    guard hold the pass action too), ``fallback=NAME`` (the controller the goodput guard hands the job to;
    default goodput; ``config``: the configured fallback_controller). ``spec`` is the whole controller
    spec, for the error message."""
    kwargs: dict[str, Any] = {}
    for kv in filter(None, opts.split("&")):
        key, _, value = kv.partition("=")
        if key == "ensemble":
            kwargs["ensemble"] = value
        elif key == "fallback":
            if not value:
                raise ValueError(f"controller {spec!r}: fallback= needs a controller name (or config)")
            kwargs["guard_fallback"] = None if value == "config" else value
        elif key in ON_OFF:
            if value not in ("on", "off"):
                raise ValueError(f"controller {spec!r}: {key}={value!r} (expected on or off)")
            kwargs[ON_OFF[key]] = value == "on"
        elif key in INTEGERS:
            if not value.isdigit():
                raise ValueError(f"controller {spec!r}: {key}={value!r} (expected an integer >= 0)")
            kwargs[key] = int(value)
        elif key in NUMBERS:
            try:
                kwargs[key] = float(value)
            except ValueError:
                raise ValueError(f"controller {spec!r}: {key}={value!r} is not a number") from None
        else:
            raise ValueError(f"controller {spec!r}: unknown option {key!r} (known: {', '.join(KNOWN)})")
    return kwargs
