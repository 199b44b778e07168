"""Atomic checkpoints that never run code when read.

Writing: rank 0 serialises the payload, writes it to a temporary file in the target's directory,
flushes, fsyncs, renames it over the target and fsyncs the directory, so the file on disk is
always either the previous checkpoint or the new one, never half-written. A failed write (a full
disk: ENOSPC, a quota, an I/O error) removes the temporary file, leaves the previous checkpoint
as it was and raises ``CheckpointWriteError`` naming the path, the size and the errno text.

Reading: ``torch.load(..., weights_only=True)``: tensors and plain data only; a file that holds
any other pickled object (a tampered file, or one written before checkpoints were plain data) is
refused with ``CheckpointError`` naming the file, and nothing in it is executed. ``save`` checks
the payload first (``check_plain``), so a producer of non-plain state fails at the save that
would have written an unreadable checkpoint, naming the key.
"""
from __future__ import annotations

import base64
import collections
import errno as errno_mod
import io
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch


class CheckpointError(RuntimeError):
    """A checkpoint could not be read (missing, corrupt, of another job, or not plain data)."""


class CheckpointWriteError(CheckpointError, OSError):
    """A checkpoint could not be written (full disk, quota, I/O error); the previous one is intact.
    Also an ``OSError`` (``errno`` is the underlying one), as the failed write raised before."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


# ------------------------------------------------------------------------------------- plain data
PLAIN_SCALARS = (str, int, float, bool, type(None))


def check_plain(obj: Any, where: str = "checkpoint") -> None:
    """Raise ``CheckpointError`` unless ``obj`` is tensors and JSON-like data: dicts (str or int
    keys: optimizer states use parameter indices), lists, tuples, str, int, float, bool, None."""
    stack: list[tuple[Any, str]] = [(obj, where)]
    while stack:
        x, at = stack.pop()
        if isinstance(x, torch.Tensor):
            continue
        if type(x) in PLAIN_SCALARS:        # exact types: a numpy float64 or an IntEnum is not plain
            continue
        if type(x) in (dict, collections.OrderedDict):
            for k, v in x.items():
                if type(k) not in (str, int):
                    raise CheckpointError(f"{at}: key {k!r} of type {type(k).__name__} is not a str or int "
                                          "(checkpoints hold tensors and plain data only)")
                stack.append((v, f"{at}[{k!r}]"))
            continue
        if type(x) in (list, tuple):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(x))
            continue
        raise CheckpointError(f"{at} is a {type(x).__module__}.{type(x).__qualname__} ({_short(x)}): checkpoints "
                              "hold tensors and plain data only (dict, list, tuple, str, int, float, bool, None)")


def to_plain(obj: Any) -> Any:
    """``obj`` with what ``check_plain`` refuses made plain: numpy scalars and arrays become
    numbers and lists, anything else not plain (a ``Path``, an enum) its ``str``. For records that
    are only informative in a checkpoint (the job's configuration)."""
    if isinstance(obj, torch.Tensor) or type(obj) in PLAIN_SCALARS:
        return obj
    if isinstance(obj, dict):
        return {k if type(k) in (str, int) else str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if hasattr(obj, "tolist") and callable(obj.tolist):          # numpy scalar / array
        return to_plain(obj.tolist())
    return str(obj)


def _short(x: Any, n: int = 60) -> str:
    r = repr(x)
    return r if len(r) <= n else r[: n - 3] + "..."


# ----------------------------------------------------------------------------------------- write
def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory (fsync, rename,
    fsync of the directory). On failure the temporary file is removed, ``path`` is untouched and
    ``CheckpointWriteError`` says what happened."""
    path = Path(path)
    tmp: str | None = None
    stage = "creating the directory"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        stage = "creating a temporary file"
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        stage = f"writing {len(data)} bytes to {tmp}"
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            stage = f"fsyncing {tmp}"
            os.fsync(f.fileno())
        stage = f"renaming {tmp} to {path}"
        os.replace(tmp, path)
        tmp = None
        stage = f"fsyncing the directory {path.parent}"
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise CheckpointWriteError(_write_error(path, len(data), stage, exc), exc.errno) from exc
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _write_error(path: Path, size: int, stage: str, exc: OSError) -> str:
    what = f"{errno_mod.errorcode.get(exc.errno, exc.errno)} ({exc.strerror})" if exc.errno else str(exc)
    msg = (f"checkpoint {path} not written: {what} while {stage}; "
           f"checkpoint size {size} bytes")
    try:
        st = os.statvfs(path.parent)
        msg += f", {st.f_bavail * st.f_frsize} bytes free on that file system"
    except OSError:
        pass
    prev = "the previous checkpoint there is unchanged" if path.exists() else "no previous checkpoint exists there"
    return f"{msg}; {prev}"


def save(path: str | os.PathLike[str], payload: dict[str, Any]) -> None:
    """Check that ``payload`` is plain data, serialise it with torch.save and write it atomically."""
    check_plain(payload, f"checkpoint {path}")
    buf = io.BytesIO()
    torch.save(payload, buf)
    atomic_write_bytes(path, buf.getvalue())


# ------------------------------------------------------------------------------------------ read
def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``: nothing in the file is executed."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any failure means refused, corrupt or truncated
        why = refusal_reason(exc)
        if why is not None:
            raise CheckpointError(
                f"checkpoint {path} refused: it holds pickled objects other than tensors and plain data ({why}). "
                "dynamix_hvd reads checkpoints with torch.load(weights_only=True) and never runs code from a file; "
                "this one was tampered with, is not a dynamix checkpoint, or was written by a dynamix_hvd version "
                "older than plain-data checkpoints (re-create it with this version)") from exc
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable: {_load_failure(exc)}") from exc
    if not isinstance(payload, dict) or "dynamix" not in payload:
        raise CheckpointError(f"checkpoint {path} has no 'dynamix' section: not written by dynamix_hvd")
    _upgrade_finetune_blob(payload, path)
    return payload


def refusal_reason(exc: BaseException) -> str | None:
    """Why ``torch.load(weights_only=True)`` refused a file (the pickled global it met), or None
    when ``exc`` is not such a refusal (garbage bytes, truncation)."""
    text = str(exc)
    if "Weights only load failed" not in text or "Unsupported operand" in text:
        return None         # not a pickle stream at all (garbage bytes): corrupt, not refused
    m = re.search(r"(?:unsupported|Unsupported global:) GLOBAL ([\w.]+)", text)
    if m:
        return f"a pickled reference to {m.group(1)}"
    m = re.search(r"WeightsUnpickler error: ([^\n]+)", text)
    return m.group(1).strip() if m else "objects the weights-only unpickler does not allow"


def _load_failure(exc: BaseException) -> str:
    """A corrupt file's load error in one line, without torch's advice to retry with
    ``weights_only=False`` (which would run whatever the file holds)."""
    text = str(exc)
    m = re.search(r"WeightsUnpickler error:\s*([^\n]+)", text)
    if "Weights only load failed" in text and m:
        return f"not a torch checkpoint ({m.group(1).strip()})"
    first = text.strip().split("\n")[0].split(". ")[0][:200]
    return f"{type(exc).__name__}: {first or 'empty or truncated file'}"


def _upgrade_finetune_blob(payload: dict[str, Any], path: Path) -> None:
    """Fine-tuned policy weights of checkpoints written before they were stored as tensors
    (``finetune.format`` 1: base64 of a ``torch.save`` blob) are decoded here, also with
    ``weights_only=True``, so a bad blob is refused naming this file."""
    ctl = payload["dynamix"].get("controller") if isinstance(payload["dynamix"], dict) else None
    ft = ctl.get("finetune") if isinstance(ctl, dict) else None
    if not isinstance(ft, dict) or not isinstance(ft.get("weights"), str):
        return
    try:
        blob = torch.load(io.BytesIO(base64.b64decode(ft["weights"])), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001
        why = refusal_reason(exc) or f"corrupt: {type(exc).__name__}: {str(exc).strip()[:200]}"
        raise CheckpointError(f"checkpoint {path} refused: its fine-tuned policy weights (controller.finetune."
                              f"weights) are not tensors and plain data ({why})") from exc
    if not isinstance(blob, dict) or not isinstance(blob.get("policy"), dict):
        raise CheckpointError(f"checkpoint {path}: controller.finetune.weights holds no 'policy' state dict")
    ft.pop("weights")
    ft["policy"] = blob["policy"]
    if blob.get("optimizer"):
        ft["optimizer"] = blob["optimizer"]
