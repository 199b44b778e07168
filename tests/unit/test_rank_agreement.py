"""Every rank must run with the same settings (config.rank_fingerprint / disagreement, pure): a
field only rank 0 reads may differ, any other field or the data set's size names the rank and the
field on every rank."""
from __future__ import annotations

import numpy as np
import pytest

from dynamix_hvd.config import (RANK0_ONLY, DynamixConfig, agreement_fields, disagreement, rank_fingerprint,
                                schema_disagreement, schema_fingerprint)


def _table(*rows: tuple[DynamixConfig, int]) -> np.ndarray:
    return np.array([rank_fingerprint(c, n) for c, n in rows])


def test_equal_settings_agree_and_rank0_only_fields_may_differ() -> None:
    base = DynamixConfig()
    assert disagreement(_table((base, 100), (base, 100), (base, 100)), 2, {}) is None
    own = DynamixConfig(controller="ppo", controller_kwargs={"policy": "x.zip"}, guard_drop=0.3, finetune=True,
                        tensorboard=False, progress=True, collector=False, collector_period_ms=7)
    assert disagreement(_table((base, 100), (own, 100)), 1, {}) is None
    assert not {"run_dir", "seed", "dataset_size"} & RANK0_ONLY


@pytest.mark.parametrize("change", [{"decision_lag": 0}, {"seed": 5}, {"base_batch": 16}, {"interval_steps": 7},
                                    {"stall_timeout_s": 0.0}, {"gns": True}, {"max_batch": (8, 16)},
                                    {"accumulation": 2}, {"shuffle": False}])
def test_a_differing_field_names_rank_and_field_on_every_rank(change: dict) -> None:
    (name, value), = change.items()
    table = _table((DynamixConfig(), 100), (DynamixConfig(), 100), (DynamixConfig(**change), 100))
    for rank in range(3):
        mine = DynamixConfig(**change).to_dict() if rank == 2 else DynamixConfig().to_dict()
        msg = disagreement(table, rank, mine)
        assert msg is not None and f"(compared with rank 0's): rank 2's {name}. Every" in msg, msg
        assert f"(rank {rank}, this one, has {name}={mine[name]!r})" in msg, msg


def test_the_data_set_size_and_several_ranks() -> None:
    c = DynamixConfig()
    table = _table((c, 100), (DynamixConfig(seed=1), 100), (c, 100), (c, 99))
    msg = disagreement(table, 3, {**c.to_dict(), "dataset_size": 99})
    assert msg is not None
    assert "(compared with rank 0's): rank 1's seed; rank 3's dataset_size. Every" in msg
    assert "same dataset_size, seed (rank 3, this one, has dataset_size=99, seed=0)" in msg


def test_run_dir_counts_only_with_automatic_checkpoints() -> None:
    # the run log is rank 0's: `run_dir=path if rank == 0 else None` is fine ...
    assert disagreement(_table((DynamixConfig(run_dir="/a"), 10), (DynamixConfig(), 10)), 0, {}) is None
    assert disagreement(_table((DynamixConfig(run_dir="/a"), 10), (DynamixConfig(run_dir="/b"), 10)), 0, {}) is None
    # ... but an automatic checkpoint waits for every rank
    a, b = DynamixConfig(run_dir="/a", checkpoint_every=5), DynamixConfig(checkpoint_every=5)
    assert "rank 1's run_dir. Every" in (disagreement(_table((a, 10), (b, 10)), 0, a.to_dict()) or "")
    assert disagreement(_table((a, 10), (DynamixConfig(run_dir="/node1", checkpoint_every=5), 10)), 0, {}) is None


def test_fingerprints_are_exact_floats_of_every_field() -> None:
    fp = rank_fingerprint(DynamixConfig(max_batch=[8, 16]), 3)      # a list from keyword arguments
    assert fp == rank_fingerprint(DynamixConfig(max_batch=(8, 16)), 3)
    assert len(fp) == len(agreement_fields()) and all(0 <= v < 2 ** 48 and v == int(v) for v in fp)


def test_another_dynamix_version_is_named_before_fingerprints_of_other_lengths() -> None:
    mine = schema_fingerprint()
    assert len(mine) == 2 and mine[0] == len(agreement_fields())
    assert schema_disagreement(np.array([mine, mine, mine]), 1) is None
    other = [mine[0] - 1, mine[1] + 1]            # a version with one setting fewer
    msg = schema_disagreement(np.array([mine, mine, other, other]), 2)
    assert msg is not None and "rank(s) 2, 3 check another set of settings than rank 0" in msg, msg
    assert f"({int(mine[0])} settings; rank 2, this one, checks {int(mine[0]) - 1})" in msg, msg
    renamed = [mine[0], mine[1] + 1]              # as many settings, other names
    assert "rank(s) 1 " in (schema_disagreement(np.array([mine, renamed]), 0) or "")
