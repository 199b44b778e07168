"""`dynamix eval-policy`: every controller in the simulator on held-out seeds.

    dynamix eval-policy --seeds 200 --sections main,ablation,transfer --out eval_dir

Held-out: training envs only ever draw even simulator seeds; evaluation uses odd ones (2 i + 1).
All controllers see the same clusters, events and noise for a given seed (paired comparison),
so differences are reported with the standard error of the paired difference.

Sections
* main:     static, oracle, proportional, goodput, random, ppo per scenario type
* ablation: ppo vs policies trained (and evaluated) without network / statistical features
* transfer: model-size family (small <-> large) and world size (trained with <= 8 workers,
            evaluated at 32 and 64)
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from dynamix_hvd.agent.rollout import EpisodeResult, evaluate_controller, factory
from dynamix_hvd.agent.sim import SCENARIOS, SimConfig, family_config
from dynamix_hvd.agent.policies import POLICY_DIR

BASELINES = ("static", "oracle", "proportional", "goodput", "random")
ABLATIONS = {"no_network": "ablations/no_network.zip", "no_statistical": "ablations/no_statistical.zip",
             "split_only": "ablations/split_only.zip"}   # split_only: no global-batch action


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=int, default=200, help="held-out seeds per scenario (main section)")
    p.add_argument("--transfer-seeds", type=int, default=100, help="held-out seeds per transfer cell")
    p.add_argument("--policy", default=None, help="policy zip (default: the shipped one)")
    p.add_argument("--policy-dir", default=str(POLICY_DIR), help="where ablations/*.zip live")
    p.add_argument("--sections", default="main,ablation,transfer")
    p.add_argument("--controllers", default=",".join(BASELINES + ("ppo",)))
    p.add_argument("--out", default=None, help="directory for results.json and eval.png")


def summarise(results: Sequence[EpisodeResult]) -> tuple[float, float, float]:
    r = np.array([x.ret for x in results])
    g = np.array([x.mean_goodput_ratio for x in results])
    return float(r.mean()), float(r.std(ddof=1) / np.sqrt(max(1, r.size))) if r.size > 1 else 0.0, float(g.mean())


def paired(a: Sequence[EpisodeResult], b: Sequence[EpisodeResult]) -> tuple[float, float]:
    d = np.array([x.ret - y.ret for x, y in zip(a, b)])
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else 0.0


def _table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(map(str, header))] + [[f"{c:.2f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([f"\n{title}", line(cells[0]), sep] + [line(r) for r in cells[1:]])


def _ctl(name: str, policy: str | None) -> Any:
    return factory("ppo", policy=policy) if name == "ppo" else factory(name)


def run_main(seeds: list[int], controllers: list[str], policy: str | None, cfg: SimConfig) -> dict[str, Any]:
    res: dict[str, dict[str, list[EpisodeResult]]] = {}
    for sc in SCENARIOS:
        res[sc] = {c: evaluate_controller(_ctl(c, policy), seeds, cfg, scenario=sc, name=c) for c in controllers}
    out: dict[str, Any] = {}
    for sc in list(SCENARIOS) + ["all"]:
        rows, out[sc] = [], {}
        for c in controllers:
            rs = [r for s in SCENARIOS for r in res[s][c]] if sc == "all" else res[sc][c]
            m, se, g = summarise(rs)
            out[sc][c] = {"mean_return": m, "se": se, "goodput_vs_oracle_split": g, "episodes": len(rs)}
            rows.append([c, m, se, g])
        print(_table(f"scenario: {sc} ({len(rs)} held-out episodes each)",
                     ["controller", "mean return", "s.e.", "goodput / oracle"], rows), flush=True)
    if "ppo" in controllers:
        for other in ("proportional", "static", "goodput"):
            if other in controllers:
                a = [r for s in SCENARIOS for r in res[s]["ppo"]]
                b = [r for s in SCENARIOS for r in res[s][other]]
                d, se = paired(a, b)
                out.setdefault("paired", {})[f"ppo-{other}"] = {"mean": d, "se": se}
                print(f"paired difference ppo - {other}: {d:+.2f} +- {se:.2f} (s.e.)")
    if "proportional" in controllers and "static" in controllers:
        a = [r for s in SCENARIOS for r in res[s]["proportional"]]
        b = [r for s in SCENARIOS for r in res[s]["static"]]
        d, se = paired(a, b)
        out.setdefault("paired", {})["proportional-static"] = {"mean": d, "se": se}
        print(f"paired difference proportional - static: {d:+.2f} +- {se:.2f} (s.e.)")
    return out


def run_ablation(seeds: list[int], policy: str | None, policy_dir: Path, cfg: SimConfig) -> dict[str, Any]:
    full = {sc: evaluate_controller(_ctl("ppo", policy), seeds, cfg, scenario=sc) for sc in SCENARIOS}
    prop = [r for sc in SCENARIOS for r in evaluate_controller(factory("proportional"), seeds, cfg, scenario=sc)]
    good = [r for sc in SCENARIOS for r in evaluate_controller(factory("goodput"), seeds, cfg, scenario=sc)]
    rows, out = [], {}
    m, se, g = summarise([r for v in full.values() for r in v])
    d, dse = paired([r for v in full.values() for r in v], prop)
    dg, dgse = paired([r for v in full.values() for r in v], good)
    rows.append(["ppo (all features)", m, se, g, "-", "-", d, dse, dg, dgse])
    out["full"] = {"mean_return": m, "se": se, "diff_vs_proportional": d, "diff_vs_proportional_se": dse,
                   "diff_vs_goodput": dg, "diff_vs_goodput_se": dgse}
    for name, rel in ABLATIONS.items():
        path = policy_dir / rel
        if not path.is_file():
            print(f"ablation {name}: {path} missing (train it, see docs/policy.md); skipped")
            continue
        ab = {sc: evaluate_controller(_ctl("ppo", str(path)), seeds, cfg, scenario=sc) for sc in SCENARIOS}
        flat_a = [r for v in ab.values() for r in v]
        flat_f = [r for v in full.values() for r in v]
        m, se, g = summarise(flat_a)
        d, dse = paired(flat_a, flat_f)
        per = {sc: summarise(ab[sc])[0] - summarise(full[sc])[0] for sc in SCENARIOS}
        dp, dpse = paired(flat_a, prop)
        dg, dgse = paired(flat_a, good)
        out[name] = {"mean_return": m, "se": se, "diff_vs_full": d, "diff_se": dse, "per_scenario_diff": per,
                     "diff_vs_proportional": dp, "diff_vs_proportional_se": dpse,
                     "diff_vs_goodput": dg, "diff_vs_goodput_se": dgse}
        rows.append([f"ppo {name}", m, se, g, d, dse, dp, dpse, dg, dgse])
    print(_table(f"ablations ({len(seeds)} seeds x {len(SCENARIOS)} scenarios, paired)",
                 ["policy", "mean return", "s.e.", "goodput / oracle", "diff vs full", "s.e.",
                  "diff vs proportional", "s.e.", "diff vs goodput", "s.e."], rows))
    for name in ABLATIONS:
        if name in out:
            print(f"  {name}: per-scenario diff vs full " +
                  ", ".join(f"{sc} {v:+.2f}" for sc, v in out[name]["per_scenario_diff"].items()))
    return out


def run_transfer(seeds: list[int], policy: str | None, policy_dir: Path, base: SimConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    small, large = policy_dir / "ablations/family_small.zip", policy_dir / "ablations/family_large.zip"
    rows = []
    if small.is_file() and large.is_file():
        for fam in ("large", "small"):
            cfg = family_config(base, model_family=fam)
            r_small = evaluate_controller(_ctl("ppo", str(small)), seeds, cfg)
            r_large = evaluate_controller(_ctl("ppo", str(large)), seeds, cfg)
            r_prop = evaluate_controller(factory("proportional"), seeds, cfg)
            native, foreign = (r_large, r_small) if fam == "large" else (r_small, r_large)
            mn, mf, mp = summarise(native)[0], summarise(foreign)[0], summarise(r_prop)[0]
            out[f"eval_{fam}"] = {"native": mn, "transferred": mf, "proportional": mp, "ratio": mf / mn}
            rows.append([fam, mn, mf, mf / mn, mp])
        print(_table(f"transfer across model-size families ({len(seeds)} seeds each)",
                     ["eval family", "trained on it", "trained on the other", "ratio", "proportional"], rows))
    else:
        print("family transfer: ablations/family_{small,large}.zip missing; skipped")
    le8 = policy_dir / "ablations/workers_le8.zip"
    rows = []
    for n in (32, 64):
        cells: list[Any] = [n]
        entry: dict[str, float] = {}
        for label, build in (("static", factory("static")), ("proportional", factory("proportional")),
                             ("ppo 2..64", _ctl("ppo", policy)),
                             ("ppo <=8", _ctl("ppo", str(le8)) if le8.is_file() else None)):
            if build is None:
                cells.append("-")
                continue
            m = summarise(evaluate_controller(build, seeds, base, n_workers=n))[0]
            entry[label] = m
            cells.append(m)
        out[f"workers_{n}"] = entry
        rows.append(cells)
    print(_table(f"transfer across world sizes ({len(seeds)} seeds each, all scenario types)",
                 ["workers", "static", "proportional", "ppo trained 2..64", "ppo trained <= 8"], rows))
    return out


def _plot(main: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    scs = list(SCENARIOS)
    ctls = list(main[scs[0]].keys())
    fig, ax = plt.subplots(figsize=(8, 3.8))
    w = 0.8 / len(ctls)
    for i, c in enumerate(ctls):
        ax.bar(np.arange(len(scs)) + i * w, [main[s][c]["mean_return"] for s in scs], w,
               yerr=[main[s][c]["se"] for s in scs], label=c)
    ax.set_xticks(np.arange(len(scs)) + 0.4 - w / 2)
    ax.set_xticklabels(scs)
    ax.set_ylabel("mean held-out return")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    import torch
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    sections = {s for s in args.sections.split(",") if s}
    seeds = [2 * i + 1 for i in range(args.seeds)]
    tseeds = [2 * i + 1 for i in range(args.transfer_seeds)]
    policy_dir = Path(args.policy_dir)
    cfg = SimConfig()
    results: dict[str, Any] = {"seeds": args.seeds, "policy": args.policy or "shipped default"}
    if "main" in sections:
        results["main"] = run_main(seeds, [c for c in args.controllers.split(",") if c], args.policy, cfg)
    if "ablation" in sections:
        results["ablation"] = run_ablation(seeds, args.policy, policy_dir, cfg)
    if "transfer" in sections:
        results["transfer"] = run_transfer(tseeds, args.policy, policy_dir, cfg)
    results["wall_s"] = round(time.perf_counter() - t0, 1)
    print(f"\n(eval took {results['wall_s']:.0f}s; reproduce: dynamix eval-policy --seeds {args.seeds} "
          f"--transfer-seeds {args.transfer_seeds} --sections {args.sections})")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(results, indent=2))
        if "main" in results:
            _plot(results["main"], out / "eval.png")
        print(f"wrote {out / 'results.json'}")
    return 0
