"""Training workloads with no downloads: MNIST-1D (generated locally by ``mnist1d``) with an
MLP, a CNN and a small ResNet-1D, and scikit-learn's bundled digits with an MLP.

Data sets are generated once and cached as ``.npz`` under ``$DYNAMIX_CACHE/data`` (default
``~/.cache/dynamix_hvd/data``), written atomically so concurrent ranks never read half a file.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

MNIST1D_SAMPLES = 10_000   # 8,000 train / 2,000 test
MNIST1D_LENGTH = 40


def cache_dir() -> Path:
    root = Path(os.environ.get("DYNAMIX_CACHE", Path.home() / ".cache" / "dynamix_hvd"))
    d = root / "data"
    d.mkdir(parents=True, exist_ok=True)
    return d


@dataclass
class Dataset:
    """Train and test tensors of one workload (inputs float32, labels int64)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int

    def __len__(self) -> int:
        return int(self.y_train.shape[0])


def _atomic_savez(path: Path, **arrays: np.ndarray) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
    os.close(fd)
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _cached(name: str, make: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    path = cache_dir() / f"{name}.npz"
    if path.exists():
        try:
            with np.load(path) as z:
                return {k: z[k] for k in z.files}
        except (OSError, ValueError):
            path.unlink(missing_ok=True)  # a corrupt cache file is regenerated
    arrays = make()
    _atomic_savez(path, **arrays)
    return arrays


def _make_mnist1d(seed: int) -> dict[str, np.ndarray]:
    # make_dataset generates locally; mnist1d's get_dataset would try a download first.
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples = MNIST1D_SAMPLES
    args.seed = seed
    d = make_dataset(args)
    return {"x": d["x"].astype(np.float32), "y": d["y"].astype(np.int64),
            "x_test": d["x_test"].astype(np.float32), "y_test": d["y_test"].astype(np.int64)}


def _make_digits(seed: int) -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    perm = np.random.default_rng(seed).permutation(len(y))
    x, y = x[perm], y[perm].astype(np.int64)
    split = int(0.8 * len(y))
    return {"x": x[:split], "y": y[:split], "x_test": x[split:], "y_test": y[split:]}


def load_data(kind: str, seed: int = 42) -> Dataset:
    """``kind`` is "mnist1d" or "digits"; the same seed gives the same data on every rank."""
    if kind == "mnist1d":
        a = _cached(f"mnist1d_n{MNIST1D_SAMPLES}_s{seed}", lambda: _make_mnist1d(seed))
    elif kind == "digits":
        a = _cached(f"digits_s{seed}", lambda: _make_digits(seed))
    else:
        raise ValueError(f"unknown data set {kind!r}; choose mnist1d or digits")
    return Dataset(torch.from_numpy(a["x"]), torch.from_numpy(a["y"]),
                   torch.from_numpy(a["x_test"]), torch.from_numpy(a["y_test"]), 10)


# ---- models ------------------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self, d_in: int, hidden: int = 100, n_out: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CNN1D(nn.Module):
    """The MNIST-1D paper's small CNN: three strided convolutions and a linear head."""

    def __init__(self, length: int = MNIST1D_LENGTH, channels: int = 25, n_out: int = 10) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv1d(1, channels, 5, stride=2, padding=1), nn.ReLU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.ReLU())
        with torch.no_grad():
            flat = self.conv(torch.zeros(1, 1, length)).numel()
        self.head = nn.Linear(flat, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x.unsqueeze(1)).flatten(1))


class _Block(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv1d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.b1 = nn.BatchNorm1d(c_out)
        self.c2 = nn.Conv1d(c_out, c_out, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm1d(c_out)
        self.skip = (nn.Sequential() if stride == 1 and c_in == c_out else
                     nn.Sequential(nn.Conv1d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm1d(c_out)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + self.skip(x))


class ResNet1D(nn.Module):
    """A small ResNet for 1-D signals: a stem, three residual blocks, global average pooling."""

    def __init__(self, width: int = 16, n_out: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv1d(1, width, 5, padding=2, bias=False), nn.BatchNorm1d(width), nn.ReLU())
        self.blocks = nn.Sequential(_Block(width, width, 1), _Block(width, 2 * width, 2),
                                    _Block(2 * width, 2 * width, 2))
        self.head = nn.Linear(2 * width, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.blocks(self.stem(x.unsqueeze(1)))
        return self.head(y.mean(dim=2))


@dataclass(frozen=True)
class Workload:
    name: str
    data: str
    build: Callable[[], nn.Module]
    lr: float


WORKLOADS: dict[str, Workload] = {
    "mnist1d_mlp": Workload("mnist1d_mlp", "mnist1d", lambda: MLP(MNIST1D_LENGTH), 0.01),
    "mnist1d_cnn": Workload("mnist1d_cnn", "mnist1d", lambda: CNN1D(), 0.01),
    "mnist1d_resnet": Workload("mnist1d_resnet", "mnist1d", lambda: ResNet1D(), 0.01),
    "digits_mlp": Workload("digits_mlp", "digits", lambda: MLP(64, hidden=64), 0.01),
}


def get_workload(name: str) -> Workload:
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; choose one of {sorted(WORKLOADS)}")
    return WORKLOADS[name]


def build(name: str, seed: int = 0, data_seed: int = 42) -> tuple[nn.Module, Dataset]:
    """The workload's model (initialised from ``seed``) and its data set."""
    w = get_workload(name)
    data = load_data(w.data, data_seed)
    torch.manual_seed(seed)
    return w.build(), data


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 4096) -> float:
    """Top-1 accuracy in eval mode (restores the previous mode)."""
    was_training = model.training
    model.eval()
    correct = 0
    for i in range(0, len(y), batch):
        correct += int((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum())
    model.train(was_training)
    return correct / max(1, len(y))


__all__ = ["Dataset", "Workload", "WORKLOADS", "build", "get_workload", "load_data", "accuracy", "cache_dir",
           "MLP", "CNN1D", "ResNet1D"]
