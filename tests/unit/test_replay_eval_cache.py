"""eval-replay's episode cache: evaluations sharing one cache file (``--reverse``) keep every episode."""
from __future__ import annotations

import json
from multiprocessing import get_context

from dynamix_hvd.agent.replay_eval import _write_cache


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
