"""Atomic checkpoints: rank 0 writes (temp file, flush, fsync, rename, fsync dir) so a
checkpoint on disk is always either the old one or the new one, never half-written."""
from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path
from typing import Any

import torch


class CheckpointError(RuntimeError):
    """A checkpoint could not be read (missing, corrupt or of another job)."""


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save(path: str | os.PathLike[str], payload: dict[str, Any]) -> None:
    """Serialise ``payload`` with torch.save and write it atomically."""
    buf = io.BytesIO()
    torch.save(payload, buf)
    atomic_write_bytes(path, buf.getvalue())


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means corrupt
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable: {exc}") from exc
    if not isinstance(payload, dict) or "dynamix" not in payload:
        raise CheckpointError(f"checkpoint {path} has no 'dynamix' section: not written by dynamix_hvd")
    return payload
