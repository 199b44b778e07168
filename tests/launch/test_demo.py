"""`scripts/demo.sh` (what `make demo` runs) end to end, on a tiny scenario and short budget."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from dynamix_hvd.demo import best_available

REPO = Path(__file__).resolve().parents[2]


def test_demo_script_prints_table_and_writes_png(tmp_path: Path) -> None:
    sc = tmp_path / "tiny.toml"
    sc.write_text((REPO / "tests/launch/test_bench.py").read_text().split('TINY = """')[1].split('"""')[0])
    out = tmp_path / "demo"
    p = subprocess.run(["bash", str(REPO / "scripts/demo.sh"), "--scenario", str(sc), "--out", str(out),
                        "--controller", "proportional", "--max-time-s", "5", "--until", "budget"],
                       capture_output=True, text=True, timeout=400, env=dict(os.environ))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "static vs proportional" in p.stdout
    assert "time_to_target_s" in p.stdout and "balance_eff" in p.stdout
    assert (out / "results.json").exists() and (out / "report.png").stat().st_size > 10_000
    # the hook's TensorBoard scalars for the controller's run (issue 8: main job leaves event files)
    assert list(out.rglob("events.out.tfevents.*")), sorted(p.name for p in out.rglob("*"))


def test_best_available_is_a_known_controller() -> None:
    from dynamix_hvd.controllers import REGISTRY

    best, why = best_available()
    assert best in REGISTRY
    assert (best == "ppo") == (why is None)


def test_a_policy_that_does_not_load_falls_back_and_says_why(tmp_path: Path) -> None:
    bad = tmp_path / "broken_policy.zip"
    bad.write_bytes(b"not a zip")
    best, why = best_available(str(bad))
    assert best == "proportional"
    assert why is not None and "broken_policy.zip" in why, why
