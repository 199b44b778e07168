"""The files a training run leaves next to its policy zip: the learning curve (``STEM_curve.csv``,
its plot) and the run's metadata with library versions (``STEM.json``). Shared by the simulator
and the replay-world trainers."""
from __future__ import annotations

import csv
import json
import platform
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np


def save_run(model: Any, out: Path, curve: Sequence[Sequence[float]], header: Sequence[str],
             meta: dict[str, Any], plot: Callable[[Sequence[Sequence[float]], Path, str], None]) -> dict[str, Any]:
    """Save ``model`` to ``out``, the curve (CSV + plot) and ``meta`` plus versions as JSON; returns
    the metadata written."""
    import stable_baselines3
    import torch

    model.save(out)
    stem = out.with_suffix("")
    with open(f"{stem}_curve.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(list(header))
        w.writerows(curve)
    plot(curve, Path(f"{stem}_curve.png"), out.name)
    meta = dict(meta)
    meta["versions"] = {"python": platform.python_version(), "torch": torch.__version__,
                        "stable_baselines3": stable_baselines3.__version__, "numpy": np.__version__}
    command = meta.pop("command", None)
    meta["command"] = command          # last, as before
    with open(f"{stem}.json", "w") as fh:
        json.dump(meta, fh, indent=2)
    return meta
