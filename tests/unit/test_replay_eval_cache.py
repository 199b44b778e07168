"""eval-replay's episode cache: evaluations sharing one cache file (``--reverse``) keep every episode."""
from __future__ import annotations

import json
from multiprocessing import get_context

import pytest

from dynamix_hvd.agent.replay_eval import _write_cache, seed_range


def _writer(args):
    path, who, n = args
    from pathlib import Path
    for i in range(n):
        _write_cache(Path(path), {f"{who}|{i}": float(i)})
    return who


def test_concurrent_writers_lose_no_episode(tmp_path):
    cp = tmp_path / "cache.json"
    with get_context("fork").Pool(4) as pool:
        pool.map(_writer, [(str(cp), w, 60) for w in "abcd"])
    got = json.loads(cp.read_text())
    assert len(got) == 240, f"{240 - len(got)} of 240 cached episodes lost"
    assert got["c|59"] == 59.0
    assert not list(tmp_path.glob("cache.tmp*"))


def test_oracles_are_evaluated_and_summarised_like_policies(tmp_path, capsys):
    # eval-replay --oracles hindsight_safe: a column per cell and the statistics, from the
    # same cache as the baselines; an unknown name is refused, naming it
    import argparse

    from dynamix_hvd.agent import replay_eval
    p = argparse.ArgumentParser()
    replay_eval.add_arguments(p)
    cache = tmp_path / "c.json"
    args = p.parse_args(["--workloads", "ncf", "--traces", "none", "--workers", "4", "--seeds", "1", "--jobs", "1",
                         "--cache", str(cache), "--oracles", "hindsight_safe"])
    assert replay_eval.run(args) == 0
    out = capsys.readouterr().out
    assert "hindsight_safe: cells 1, geomean hindsight_safe/goodput" in out
    assert any(k.endswith("|hindsight_safe") for k in json.loads(cache.read_text()))
    bad = p.parse_args(["--oracles", "hindsight_saf", "--cache", ""])
    assert replay_eval.run(bad) == 2
    assert "'hindsight_saf'" in capsys.readouterr().out


def _eval_ncf4(cache, *extra: str) -> int:
    """``dynamix eval-replay`` on ncf, no trace, N = 4, seed 0, one job, into ``cache``, with ``extra`` flags."""
    import argparse

    from dynamix_hvd.agent import replay_eval
    p = argparse.ArgumentParser()
    replay_eval.add_arguments(p)
    return replay_eval.run(p.parse_args(["--workloads", "ncf", "--traces", "none", "--workers", "4", "--seeds", "1",
                                         "--jobs", "1", "--cache", str(cache), *extra]))


def test_the_noise_scale_model_is_applied_and_cached_apart(tmp_path, capsys):
    # --gns-model continuous runs every episode in that world (the measured noise scale no longer
    # jumps at a batch change, so ncf's goodput runs another episode: 0.96x until session 51, 1.003x
    # since the hold's margin became 3) and caches it under its own key
    cache = tmp_path / "c.json"
    for model in ("run", "continuous"):
        assert _eval_ncf4(cache, "--gns-model", model) == 0
    assert "noise-scale model continuous" in capsys.readouterr().out
    got = json.loads(cache.read_text())
    run, cont = got["ncf|none|4|0|goodput|guard-r1"], got["ncf|none|4|0|goodput|gns=continuous|guard-r1"]
    assert cont != run and abs(cont / run - 1) > 1e-4      # not the same episode


def test_the_guard_is_on_by_default_and_cached_apart(tmp_path, capsys):
    # session 65: goodput and ppo run behind the live goodput guard unless --guard off; their episodes
    # are keyed '|guard-r1' (guard_retries 1, session 66; the caches before hold the controllers alone under
    # the plain keys and session 65's guard without retries under '|guard'), the
    # unguarded baselines' keys are unchanged
    cache = tmp_path / "c.json"
    for guard in ("on", "off"):
        assert _eval_ncf4(cache, "--guard", guard) == 0
    out = capsys.readouterr().out
    assert "goodput guard on" in out and "goodput guard off" in out
    keys = set(json.loads(cache.read_text()))
    assert {"ncf|none|4|0|goodput|guard-r1", "ncf|none|4|0|goodput", "ncf|none|4|0|static"} <= keys
    assert "ncf|none|4|0|static|guard-r1" not in keys and "ncf|none|4|0|proportional|guard-r1" not in keys
    assert sum(k.endswith("|guard-r1") and "|ppo#" in k for k in keys) == 1


def test_policies_only_runs_a_baseline_named_in_oracles(tmp_path, capsys):
    # --policies-only --oracles goodput: the policy and goodput are cached for new seeds (the pair a
    # per-cell ratio needs), and no other baseline (static's episodes are the slow ones)
    cache = tmp_path / "c.json"
    assert _eval_ncf4(cache, "--policies-only", "--oracles", "goodput") == 0
    assert "cached the policies' episodes" in capsys.readouterr().out
    ctls = sorted(k.split("|")[4] for k in json.loads(cache.read_text()))
    assert len(ctls) == 2 and ctls[0] == "goodput" and ctls[1].startswith("ppo#"), ctls


def test_the_cache_key_holds_the_guards_settings_as_they_run():
    """A policy's cache key names the departure guard's settings it runs with, defaults included, so
    an episode cached under an older default is not read as one of the new (session 42: the warm-up
    became the default; caches from before it keyed ``?refute=2`` for no warm-up, and still do)."""
    from dynamix_hvd.agent.replay_eval import _file_hash
    from dynamix_hvd.controllers.policy.io import default_policy_path
    h = _file_hash("").partition("?")[0]
    path = str(default_policy_path())
    assert _file_hash("") == _file_hash(path) == _file_hash(f"{path}?refute=2&warmup=16") == f"{h}?refute=2&warmup=16"
    assert _file_hash(f"{path}?refute=2&warmup=0") == f"{h}?refute=2"           # the pre-warm-up key
    assert _file_hash(f"{path}?warmup=8&trust=0.03") == f"{h}?warmup=8&trust=0.03&refute=2"
    assert _file_hash(f"{path}?refute=0&warmup=0") == f"{h}?refute=0"


def test_seed_range_reads_lo_hi_and_names_bad_text():
    assert list(seed_range("5-7")) == [5, 6, 7] and list(seed_range("3-3")) == [3]
    for bad in ("9-5", "5", "a-b", "-3", "5-"):
        with pytest.raises(ValueError, match=repr(bad)):
            seed_range(bad)
