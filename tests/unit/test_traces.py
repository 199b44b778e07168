"""Trace loaders: the shipped copies load, and every malformed input names file, row and column."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from dynamix_hvd.errors import DynamixError
from dynamix_hvd.traces import (DATA_DIR, TraceError, load_cov, load_pai_job, load_pollux, shipped_pai,
                                shipped_workload, shipped_workloads)


def test_shipped_data_and_licences():
    assert shipped_workloads() == ["bert", "cifar10", "deepspeech2", "ncf"]
    for d in ("pollux", "pai"):
        assert "Apache" in (DATA_DIR / "pollux" / "LICENSE").read_text() or d == "pai"
        assert (DATA_DIR / d / "LICENSE").is_file()
    assert "Attribution 4.0" in (DATA_DIR / "pai" / "LICENSE").read_text(encoding="utf-8-sig")
    assert "Alibaba" in (DATA_DIR / "README.md").read_text()
    for w in shipped_workloads():
        wl = load_pollux(shipped_workload(w))
        assert len(wl.curves) >= 6 and list(wl.batches) == sorted(wl.batches)
        assert wl.throughput.step_time.size > 100


def test_pai_job_matrix():
    j2 = load_pai_job(shipped_pai("job_2_norm"))
    assert j2.times.shape[1] == 10 and j2.stride == 10
    # README: job 2 max/median worker time per sampled iteration has median 1.09
    n = j2.normalised()
    assert abs(np.median(n.max(axis=1) / np.median(n, axis=1)) - 1.09) < 0.01
    assert np.allclose(np.median(j2.normalised("worker"), axis=0), 1.0)
    cov = load_cov(shipped_pai("coefficient_variation"))
    assert len(cov) == 100
    med = np.percentile([np.median(c) for c in cov], [10, 50, 90])
    assert abs(med[1] - 0.087) < 0.005     # README: 0.035 / 0.087 / 0.99


@pytest.fixture()
def wdir(tmp_path: Path) -> Path:
    d = tmp_path / "w"
    shutil.copytree(shipped_workload("cifar10"), d)
    for f in d.iterdir():
        f.chmod(0o644)
    return d


def _rewrite(path: Path, row: int, col: int, value: str) -> None:
    lines = path.read_text().splitlines()
    cells = lines[row - 1].split(",")
    cells[col] = value
    lines[row - 1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


def _err(match: str, fn, *a):
    with pytest.raises(TraceError) as ei:
        fn(*a)
    assert isinstance(ei.value, DynamixError) and isinstance(ei.value, ValueError)
    for part in match.split("|"):
        assert part in str(ei.value), (part, str(ei.value))
    return ei.value


def test_pollux_errors_name_file_row_column(wdir: Path):
    v = wdir / "validation-512.csv"
    _rewrite(v, 4, 2, "abc")                       # metric of the 3rd data row
    e = _err("validation-512.csv|row 4|'metric'|'abc'", load_pollux, wdir)
    assert e.row == 4 and e.column == "metric"
    shutil.copy(shipped_workload("cifar10") / "validation-512.csv", v)
    v.chmod(0o644)
    _rewrite(v, 6, 1, "10")                        # iteration drops
    _err("validation-512.csv|row 6|'iteration'|not strictly increasing", load_pollux, wdir)
    v.write_text(v.read_text().replace("grad_var", "gvar", 1))
    _err("validation-512.csv|row 1|'grad_var'|missing column", load_pollux, wdir)
    v.unlink()
    (wdir / "validation-big.csv").write_text("iteration,metric,grad_sqr,grad_var\n1,0.5,1,1\n")
    _err("validation-big.csv|integer", load_pollux, wdir)


def test_pollux_throughput_errors(wdir: Path, tmp_path: Path):
    p = wdir / "placements.csv"
    _rewrite(p, 3, 0, "102")
    _err("placements.csv|row 3|'placement'|digits 1-9", load_pollux, wdir)
    _rewrite(p, 3, 0, "1")
    _rewrite(p, 5, 2, "")
    _err("placements.csv|row 5|'step_time'|empty cell", load_pollux, wdir)
    p.unlink()
    s = wdir / "scalability.csv"
    _rewrite(s, 2, 1, "3")                         # 3 replicas on 6 nodes
    _err("scalability.csv|row 2|'num_replicas'", load_pollux, wdir)
    s.unlink()
    _err("no placements.csv or scalability.csv", load_pollux, wdir)
    empty = tmp_path / "empty"
    empty.mkdir()
    _err("no validation-B.csv", load_pollux, empty)
    _err("not found", load_pollux, tmp_path / "nope")


def test_pai_errors(tmp_path: Path):
    f = tmp_path / "job.csv"
    f.write_text(",worker,gpu,time,batch_time_norm\n0,0,20,1,700\n1,1,20,1,710\n2,0,20,11,705\n"
                 "3,0,20,11,705\n4,1,20,11,x\n")
    _err("job.csv|row 6|'batch_time_norm'|non-numeric", load_pai_job, f)
    f.write_text(",worker,gpu,time,batch_time_norm\n0,0,20,1,700\n1,1,20,1,710\n2,0,20,11,705\n"
                 "3,0,20,11,705\n4,1,20,11,712\n5,1,20,5,712\n")   # exact repeat dropped; worker 1 goes back
    _err("job.csv|row 7|'time'|worker 1", load_pai_job, f)
    f.write_text(",worker,gpu,time,batch_time_norm\n0,0,20,1,700\n1,1,20,1,710\n2,0,20,11,705\n"
                 "3,0,20,11,705\n4,1,20,11,712\n")
    job = load_pai_job(f)
    assert job.times.shape == (2, 2) and job.workers == (0, 1)
    f.write_text(",worker,gpu,iteration,batch_time_norm\n0,0,20,1,700\n")
    _err("job.csv|row 1|'time'|missing column", load_pai_job, f)
    c = tmp_path / "cov.csv"
    c.write_text(",0,1,2\njob_a,0.1,0.2,0.3\njob_b,0.1,,0.3\n")
    _err("cov.csv|row 3|'2'|after an empty cell", load_cov, c)
    c.write_text(",0,1,2\njob_a,0.1,0.2,-1\n")
    _err("cov.csv|row 2|'2'|>= 0", load_cov, c)
    c.write_text(",0,1,2\njob_a,0.1,0.2,\njob_b,1,2,3\n")
    assert [x.size for x in load_cov(c)] == [2, 3]
