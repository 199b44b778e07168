"""MPI test harness: the same tests run under `mpirun -np 1` and `-np 4`.

- Only rank 0 prints and writes the junit report.
- A test that fails on any rank aborts the whole job (MPI_Abort) so that the other ranks,
  possibly waiting in a collective, never hang.
"""
from __future__ import annotations

import os
import sys

import pytest
from mpi4py import MPI

COMM = MPI.COMM_WORLD


def pytest_configure(config: pytest.Config) -> None:
    if COMM.Get_rank() != 0:
        config.option.xmlpath = None
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives for the process


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if report.failed and COMM.Get_size() > 1:
        sys.stderr.write(f"\n[rank {COMM.Get_rank()}] {item.nodeid} failed:\n{report.longreprtext}\n")
        sys.stderr.flush()
        COMM.Abort(1)


@pytest.fixture
def comm() -> MPI.Comm:
    return COMM


@pytest.fixture
def pmpi_reader() -> object:
    """The native reader of the preloaded PMPI recorder; skipped when the library is not
    preloaded, failed when DYNAMIX_REQUIRE_PMPI=1 (as run_tests.sh sets)."""
    from dynamix_hvd import load_native

    r = load_native().CommReader()
    if not r.available:
        if os.environ.get("DYNAMIX_REQUIRE_PMPI") == "1":
            pytest.fail(f"PMPI recorder required but unavailable: {r.status}")
        pytest.skip(r.status)
    return r
