"""The one place that imports the compiled extension and turns failure into a clear error."""
from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

REBUILD_HINT = "pip install --no-build-isolation -e . (from the dynamix_hvd checkout) or `make install`"


class NativeExtensionError(ImportError):
    """The compiled extension dynamix_hvd._native is missing, broken or stale."""


def _stale(module: ModuleType) -> bool:
    """True when a C++ source is newer than the compiled module (editable installs only)."""
    so = Path(getattr(module, "__file__", "") or "")
    root = Path(__file__).resolve().parent.parent / "csrc"
    if not so.exists() or not root.is_dir():
        return False
    built = so.stat().st_mtime
    return any(p.stat().st_mtime > built for p in root.rglob("*") if p.suffix in {".cc", ".h"})


def load_native(check_stale: bool = True) -> ModuleType:
    """Import dynamix_hvd._native or raise NativeExtensionError naming the fix."""
    try:
        module = importlib.import_module("dynamix_hvd._native")
    except ImportError as exc:
        raise NativeExtensionError(
            f"dynamix_hvd's C++ extension (dynamix_hvd._native) could not be imported: {exc}. "
            f"Rebuild it with: {REBUILD_HINT}"
        ) from exc
    if check_stale and _stale(module):
        raise NativeExtensionError(
            f"dynamix_hvd._native at {module.__file__} is older than the C++ sources in csrc/. "
            f"Rebuild it with: {REBUILD_HINT}"
        )
    return module
