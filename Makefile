# The two README commands:  `make demo` (main job) and `make test` (whole test suite).
# Both run the idempotent setup first (apt Open MPI, venv, torch, mpi4py, Horovod wheel cache).
VENV ?= $(CURDIR)/.venv
PY := $(VENV)/bin/python
NP ?= 4

.PHONY: setup install demo test test-unit test-mpi bench clean

setup:
	bash scripts/setup_env.sh

install:
	$(PY) -m pip install --no-build-isolation --no-deps -e .

demo: setup
	bash scripts/demo.sh

test: setup
	bash scripts/run_tests.sh

test-unit:
	$(PY) -m pytest tests/unit -q

test-mpi:
	mpirun --allow-run-as-root --oversubscribe -np $(NP) $(PY) -m mpi4py -m pytest tests/mpi -q

clean:
	rm -rf build *.egg-info dynamix_hvd/_native*.so dynamix_hvd/lib
