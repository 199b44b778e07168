"""Workloads: local data (no download), model shapes, a few steps of learning."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dynamix_hvd import workloads as W


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNAMIX_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_digits_data_and_cache() -> None:
    d = W.load_data("digits", seed=1)
    assert d.x_train.shape[1] == 64 and d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    assert len(d) + len(d.y_test) == 1797
    again = W.load_data("digits", seed=1)
    assert torch.equal(d.x_train, again.x_train)
    assert list(W.cache_dir().glob("digits_s1.npz"))


def test_mnist1d_generated_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    import requests

    def no_network(*a: object, **k: object) -> None:
        raise AssertionError("mnist1d tried to download")

    monkeypatch.setattr(requests, "get", no_network)
    d = W.load_data("mnist1d", seed=42)
    assert d.x_train.shape == (8000, 40) and d.x_test.shape == (2000, 40)
    assert set(d.y_train.unique().tolist()) == set(range(10))


@pytest.mark.parametrize("name", sorted(W.WORKLOADS))
def test_models_forward_and_learn(name: str) -> None:
    model, data = W.build(name, seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=W.get_workload(name).lr)
    x, y = data.x_train[:64], data.y_train[:64]
    assert model(x).shape == (64, 10)
    first = F.cross_entropy(model(x), y).item()
    for _ in range(30):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first
    assert 0.0 <= W.accuracy(model, data.x_test, data.y_test) <= 1.0
    assert model.training


def test_same_seed_same_init() -> None:
    a, _ = W.build("mnist1d_mlp", seed=5)
    b, _ = W.build("mnist1d_mlp", seed=5)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_unknown() -> None:
    with pytest.raises(ValueError, match="unknown workload"):
        W.get_workload("nope")
    with pytest.raises(ValueError, match="unknown data set"):
        W.load_data("nope")
