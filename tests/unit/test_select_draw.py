"""``dynamix select-policy``: the ranking of training draws on validation worlds, and the command."""
from __future__ import annotations

import argparse
import json
import math
import zipfile
from pathlib import Path

import pytest

from dynamix_hvd.agent import select_draw
from dynamix_hvd.agent.select_draw import keep_draw, rank_draws

POLICIES = Path(select_draw.__file__).resolve().parent / "policies"
A, B = ("bert", "none", 8), ("ncf", "none", 32)


def test_draws_rank_by_the_geometric_mean_of_their_median_ratios():
    goodput = {A: [100, 110, 90], B: [10, 10, 10]}
    ranked = rank_draws({"slow": {A: [100, 100, 100], B: [10, 11, 10]},      # 1.0, 1.0
                         "fast": {A: [90, 95, 80], B: [12, 12, 11]},         # 0.9, 1.2 -> geomean 1.039
                         "best": {A: [80, 95, 70], B: [10, 9, 11]}},         # 0.8, 1.0 -> 0.894
                        goodput)
    assert [r["label"] for r in ranked] == ["best", "slow", "fast"]
    assert ranked[0]["geomean"] == pytest.approx(math.sqrt(0.8 * 1.0))
    assert ranked[2]["max_cell"] == pytest.approx(1.2)
    assert all(r["cells"] == 2 and r["misses"] == 0 for r in ranked)


def test_a_draw_that_misses_the_target_ranks_last_and_ties_keep_their_order():
    goodput = {A: [100, 100, 100], B: [10, 10, 10]}
    ranked = rank_draws({"first": {A: [100] * 3, B: [10] * 3},
                         "misses": {A: [50, None, None], B: [5] * 3},      # median a miss in A, half the time in B
                         "second": {A: [100] * 3, B: [10] * 3}}, goodput)
    assert [r["label"] for r in ranked] == ["first", "second", "misses"]
    assert ranked[2]["misses"] == 1 and math.isinf(ranked[2]["geomean"])
    # between draws that both miss, the one that misses in fewer cells first
    both = rank_draws({"twice": {A: [None] * 3, B: [None] * 3}, "once": {A: [None] * 3, B: [50] * 3}}, goodput)
    assert [(r["label"], r["misses"]) for r in both] == [("once", 1), ("twice", 2)]


def test_cells_must_match_goodputs():
    with pytest.raises(ValueError, match="'d'"):
        rank_draws({"d": {A: [1.0]}}, {A: [1.0], B: [1.0]})


def test_an_incumbent_is_replaced_only_by_a_measurably_faster_draw():
    base = {A: [100.0 + 5 * i for i in range(10)], B: [50.0 + 3 * i for i in range(10)]}
    goodput = {c: [t * 1.1 for t in ts] for c, ts in base.items()}

    def scaled(f, alternate):          # x f, then seed by seed x (1 - alternate) and x (1 + alternate)
        return {c: [t * f * (1 + (alternate if i % 2 else -alternate)) for i, t in enumerate(ts)]
                for c, ts in base.items()}
    times = {"inc": base, "tie": scaled(0.99, 0.1), "lost": scaled(1.1, 0.0)}
    ranked = rank_draws(times, goodput)
    assert [r["label"] for r in ranked] == ["tie", "inc", "lost"]      # first by its geomean ...
    assert keep_draw(ranked, times) == "tie"                           # ... and kept without an incumbent,
    lo, hi = select_draw.paired_interval(times, "tie", "inc")
    assert lo < 1.0 < hi                                               # but it ties the incumbent:
    assert keep_draw(ranked, times, incumbent="inc") == "inc"
    times["fast"] = scaled(0.9, 0.01)                                  # measurably faster
    ranked = rank_draws(times, goodput)
    assert select_draw.paired_interval(times, "fast", "inc")[1] < 1.0
    assert keep_draw(ranked, times, incumbent="inc") == "fast"
    assert keep_draw(ranked, times, incumbent="lost") == "fast"        # the fastest of those measurably faster
    with pytest.raises(ValueError, match="'nope'"):
        keep_draw(ranked, times, incumbent="nope")


def _with_workloads(src: Path, dst: Path, workloads: list[str]) -> Path:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            blob = zin.read(info.filename)
            if info.filename == "data":
                data = json.loads(blob)
                data["policy_kwargs"]["dynamix_config"]["workloads"] = workloads
                blob = json.dumps(data).encode()
            zout.writestr(info, blob)
    return dst


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    select_draw.add_arguments(p)
    return p.parse_args(argv)


def test_the_command_keeps_the_fastest_draw_byte_for_byte(tmp_path, capsys):
    # two real draws on ncf's cell (real replay episodes, goodput alongside): the file kept is the one
    # the printed ranking puts first, its figure the ratio of medians eval-replay's cache holds
    from dynamix_hvd.agent.replay_eval import episode_key, policy_tag
    draws = [str(POLICIES / "default.zip"), str(POLICIES / "imitate_h20.zip")]
    cache, out = tmp_path / "c.json", tmp_path / "best.zip"
    assert select_draw.run(_args([*draws, "--out", str(out), "--workloads", "ncf", "--traces", "none",
                                  "--workers", "8", "--seeds", "3", "--cache", str(cache)])) == 0
    printed = capsys.readouterr().out
    best = printed.strip().splitlines()[-1].split("kept ")[1].split(" -> ")[0]
    assert best in draws and out.read_bytes() == Path(best).read_bytes()
    eps = json.loads(cache.read_text())
    seeds = range(1000, 1003)

    def med(tag):
        return sorted(eps[episode_key("ncf", "none", 8, s, tag)] for s in seeds)[1]
    figs = {d: med(policy_tag(d)) / med("goodput") for d in draws}
    assert min(figs, key=lambda d: (figs[d], draws.index(d))) == best
    assert f"geomean {figs[best]:.3f}" in printed


def test_bad_input_is_refused_by_name(tmp_path, capsys):
    d = str(POLICIES / "default.zip")
    assert select_draw.run(_args([d, str(tmp_path / "nope.zip"), "--out", str(tmp_path / "o.zip")])) == 2
    assert "nope.zip" in capsys.readouterr().out
    assert select_draw.run(_args([d, "--out", d])) == 2
    assert "is one of the draws" in capsys.readouterr().out
    other = _with_workloads(POLICIES / "default.zip", tmp_path / "ncf_only.zip", ["ncf"])
    assert select_draw.run(_args([d, str(other), "--out", str(tmp_path / "o.zip")])) == 2
    msg = capsys.readouterr().out
    assert "different workloads" in msg and "ncf_only.zip: ncf" in msg
    assert not (tmp_path / "o.zip").exists()
    assert select_draw.run(_args([d, "--incumbent", str(tmp_path / "inc.zip"), "--out", str(tmp_path / "o.zip")])) == 2
    assert "--incumbent" in (msg := capsys.readouterr().out) and "inc.zip" in msg
