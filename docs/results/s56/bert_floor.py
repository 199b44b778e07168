"""The best per-workload figure any learned policy has reached, over every evaluation recorded in
docs/results/s*/ (the summary lines `NAME: cells 24, geomean NAME/goodput ..., per workload bert X, ...`
that `dynamix eval-replay` prints), oracles excluded. In distribution (every workload trained on) and
left out apart: a `loo` line from `--loo W=P` holds left-out figures only; a policy named `loo_W...`
was trained without W and is left out on W alone. Sessions since 22 (every replay evaluation) and since 31
(goodput with its overlap fit, the baseline of today).

    .venv/bin/python docs/results/s56/bert_floor.py [SINCE ...]
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ORACLES = {"causal_safe", "hindsight_safe", "causal", "causal4", "hindsight", "goodput", "static", "proportional"}
LINE = re.compile(r"^(?P<name>[\w.+-]+): cells (?P<cells>\d+), geomean .*?per workload (?P<per>.*)$")
WORKLOADS = ("bert", "cifar10", "deepspeech2", "ncf")


def scan(root: Path):
    for path in sorted(root.glob("s*/*.txt")):
        for line in path.read_text(errors="replace").splitlines():
            m = LINE.match(line.strip())
            if not m or m["name"] in ORACLES:
                continue
            per = dict(re.findall(r"(\w+) ([0-9.]+)", m["per"]))
            yield path, m["name"], {w: float(per[w]) for w in WORKLOADS if w in per}


def main(root: Path, since: int) -> None:
    best: dict[tuple[str, str], tuple[float, str]] = {}
    count = {"in distribution": 0, "left out": 0}
    for path, name, per in scan(root):
        if int(path.parent.name[1:]) < since:
            continue
        named = [w for w in WORKLOADS if w in name]
        for w, v in per.items():
            left_out = name.startswith("loo") and (w in named if named else True)
            kind = "left out" if left_out else "in distribution"
            count[kind] += 1
            key = (kind, w)
            if key not in best or v < best[key][0]:
                best[key] = (v, f"{name} in {path.relative_to(root)}")
    for kind in ("in distribution", "left out"):
        print(f"{kind} (sessions >= {since}): {count[kind]} per-workload figures of learned policies")
        for w in WORKLOADS:
            if (kind, w) in best:
                v, where = best[(kind, w)]
                print(f"  {w:12s} best {v:.3f}x goodput ({where})")


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    for since in (int(a) for a in (sys.argv[1:] or ["22", "31"])):
        main(root, since)
