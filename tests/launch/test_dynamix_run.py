"""`dynamix run` and `--print-preload` as users run them: the preload reaches every rank of a
real `mpirun -np 2`, which then records its allreduces exactly; `dynamix probe` works under
mpirun too (one JSON line per rank)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dynamix_hvd.launch import preload_command, preload_env, preload_path

PY = sys.executable
MPI_ARGS = ["--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]
needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun not installed")


def dynamix(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "dynamix_hvd.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_print_preload_names_the_built_library() -> None:
    out = subprocess.run([PY, "-m", "dynamix_hvd.launch", "--print-preload"], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert Path(out).is_file() and out.endswith("libdynamix_pmpi.so") and Path(out) == preload_path()


def test_preload_env_prepends_once() -> None:
    lib = str(preload_path())
    env = preload_env({"LD_PRELOAD": f"/x/libfoo.so {lib}"})
    assert env["LD_PRELOAD"] == f"{lib} /x/libfoo.so"
    cmd, env2 = preload_command(["mpirun", "-np", "2", "python", "t.py"], {"PATH": "/bin"})
    assert cmd[:3] == ["mpirun", "-x", f"LD_PRELOAD={lib}"] and "LD_PRELOAD" not in env2
    cmd, env3 = preload_command(["horovodrun", "-np", "2", "python", "t.py"], {"PATH": "/bin"})
    assert cmd[0] == "horovodrun" and env3["LD_PRELOAD"] == lib


def test_run_preloads_a_plain_command() -> None:
    code = "from dynamix_hvd import load_native; r = load_native().CommReader(); print(r.available, r.status)"
    p = dynamix("run", "--", PY, "-c", code)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[0] == "True"


def test_run_propagates_exit_code_and_missing_command() -> None:
    assert dynamix("run", "--", PY, "-c", "raise SystemExit(7)").returncode == 7
    assert dynamix("run").returncode == 2
    assert dynamix("run", "--", "no-such-command-dx").returncode == 127


@needs_mpirun
def test_run_mpirun_records_exact_allreduces(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import json, numpy as np
        from mpi4py import MPI
        from dynamix_hvd import load_native
        n = load_native(); r = n.CommReader(); c = MPI.COMM_WORLD
        t0 = r.totals(n.OP_ALLREDUCE, n.CLASS_DATA)
        a = np.ones(4096, dtype=np.float32); b = np.empty_like(a)
        for _ in range(50):
            c.Allreduce(a, b)
        t1 = r.totals(n.OP_ALLREDUCE, n.CLASS_DATA)
        row = json.dumps({"rank": c.rank, "available": r.available, "count": t1.count - t0.count,
                          "bytes": t1.bytes - t0.bytes, "sum": float(b[0])})
        open(__file__ + f".{c.rank}.json", "w").write(row)  # one file per rank: stdout lines can interleave
    """))
    p = dynamix("run", "--", "mpirun", *MPI_ARGS, "-np", "2", PY, "-m", "mpi4py", str(script))
    assert p.returncode == 0, p.stderr
    rows = [json.loads(Path(f"{script}.{r}.json").read_text()) for r in range(2)]
    assert sorted(r["rank"] for r in rows) == [0, 1]
    for r in rows:
        assert r == {"rank": r["rank"], "available": True, "count": 50, "bytes": 50 * 4096 * 4, "sum": 2.0}


@needs_mpirun
def test_probe_under_mpirun_one_line_per_rank(tmp_path: Path) -> None:
    # per-rank output files: two ranks' stdout lines may interleave on mpirun's own stdout
    p = dynamix("run", "--", "mpirun", *MPI_ARGS, "--output-filename", str(tmp_path / "out"), "-np", "2", PY,
                "-m", "dynamix_hvd.cli", "probe", "--window", "0.2", "--interfaces", "lo", "--no-gpu")
    assert p.returncode == 0, p.stderr
    files = sorted((tmp_path / "out").rglob("stdout"))
    assert len(files) == 2, files
    snaps = [json.loads(l) for f in files for l in f.read_text().splitlines() if l.startswith("{")]
    assert sorted(s["rank"] for s in snaps) == [0, 1] and all(s["size"] == 2 for s in snaps)
    assert all(s["collectives"]["available"] for s in snaps)
    assert all("lo" in s["network"] for s in snaps)
