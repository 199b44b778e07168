#!/usr/bin/env bash
# Idempotent environment setup for dynamix_hvd. Does only what is missing:
#   1. Open MPI, iproute2 (ip netns, tc) and ping from apt (needs root or sudo)
#   2. a virtual environment: $DYNAMIX_VENV if set; else <repo>/.venv if it exists; else a
#      shared one in $DYNAMIX_CACHE keyed by Python version, linked as <repo>/.venv (so a fresh
#      clone on the same machine reuses it and its setup takes about a minute)
#   3. torch==2.13.0, mpi4py (built against the system MPI), numpy, pybind11,
#      stable-baselines3, gymnasium, test/bench tools
#   4. Horovod 0.28.1 built from its PyPI sdist with PyTorch + MPI + Gloo, with the
#      two fixes it needs today (CMAKE_POLICY_VERSION_MINIMUM=3.5, C++17), cached as a
#      wheel outside the checkout ($DYNAMIX_CACHE, default ~/.cache/dynamix_hvd) keyed
#      by Horovod, torch, Python and MPI versions
#   5. dynamix_hvd itself (pip install -e .), which compiles the C++ extension
#   6. checks `horovodrun --check-build` lists PyTorch and MPI
# Users who bring their own CUDA torch + Horovod skip this and run `pip install .`.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${DYNAMIX_CACHE:-$HOME/.cache/dynamix_hvd}"
PY="${PYTHON:-python3}"
if [ -n "${DYNAMIX_VENV:-}" ]; then
  VENV="$DYNAMIX_VENV"
elif [ -e "$REPO/.venv" ]; then
  VENV="$REPO/.venv"
else
  VENV="$CACHE/venv-$("$PY" -c 'import sys;print(f"py{sys.version_info[0]}{sys.version_info[1]}")')"
  mkdir -p "$CACHE"
  ln -sfn "$VENV" "$REPO/.venv"
fi
HOROVOD_VERSION="0.28.1"
TORCH_VERSION="2.13.0"
T0=$(date +%s)
log() { echo "[setup $(( $(date +%s) - T0 ))s] $*"; }

# ---- 1. system packages ---------------------------------------------------------
need_apt=()
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin)
[ -e /usr/include/x86_64-linux-gnu/openmpi/mpi.h ] || [ -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] \
  || dpkg -s libopenmpi-dev >/dev/null 2>&1 || need_apt+=(libopenmpi-dev)
command -v tc >/dev/null 2>&1 || need_apt+=(iproute2)
command -v ping >/dev/null 2>&1 || need_apt+=(iputils-ping)
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  log "apt-get install ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
MPI_VERSION="$(mpirun --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' || echo unknown)"
log "Open MPI $MPI_VERSION"

# ---- 2. virtual environment -----------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  log "creating venv $VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel
fi
VPY="$VENV/bin/python"
PIP=("$VPY" -m pip install -q)
have() { "$VPY" - "$@" <<'PYEOF' 2>/dev/null
import sys
from importlib import metadata
for spec in sys.argv[1:]:
    name, _, ver = spec.partition("==")
    try:
        got = metadata.version(name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if ver and got.split("+")[0] != ver:
        sys.exit(1)
PYEOF
}

# ---- 3. python dependencies -----------------------------------------------------
have "torch==$TORCH_VERSION" || { log "pip install torch==$TORCH_VERSION"; "${PIP[@]}" "torch==$TORCH_VERSION"; }
DEPS=(numpy pybind11 stable-baselines3 gymnasium mnist1d scikit-learn matplotlib tensorboard
      tqdm pytest hypothesis psutil packaging cloudpickle)
missing=()
for d in "${DEPS[@]}"; do have "$d" || missing+=("$d"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "pip install ${missing[*]}"
  "${PIP[@]}" "torch==$TORCH_VERSION" "${missing[@]}"
fi
# the "adaptdl" baseline controller runs AdaptDL's own goodput code; --no-deps: its scheduler
# dependencies (redis, portpicker, pandas, semver) are not needed for adaptdl.goodput
have "adaptdl==0.2.11" && have autograd || { log "pip install adaptdl==0.2.11 (--no-deps) autograd scipy";
  "${PIP[@]}" "torch==$TORCH_VERSION" autograd scipy && "${PIP[@]}" --no-deps "adaptdl==0.2.11"; }
if ! "$VPY" -c "import mpi4py.MPI" >/dev/null 2>&1; then
  log "pip install mpi4py (built against system Open MPI)"
  MPICC=mpicc "${PIP[@]}" --no-binary mpi4py mpi4py
fi

# ---- 4. Horovod -----------------------------------------------------------------
PYV="$("$VPY" -c 'import sys;print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
KEY="horovod-${HOROVOD_VERSION}_torch-${TORCH_VERSION}_${PYV}_ompi-${MPI_VERSION}"
WHEELDIR="$CACHE/wheels/$KEY"
if ! have "horovod==$HOROVOD_VERSION" || ! "$VPY" -c "import horovod.torch" >/dev/null 2>&1; then
  if ! ls "$WHEELDIR"/horovod-*.whl >/dev/null 2>&1; then
    log "building Horovod $HOROVOD_VERSION wheel (about 12 min on 2 cores) into $WHEELDIR"
    BUILD="$(mktemp -d)"
    trap 'rm -rf "$BUILD"' EXIT
    "$VPY" -m pip download -q --no-deps --no-binary :all: -d "$BUILD" "horovod==$HOROVOD_VERSION"
    tar -xzf "$BUILD"/horovod-"$HOROVOD_VERSION".tar.gz -C "$BUILD"
    SRC="$BUILD/horovod-$HOROVOD_VERSION"
    # fix 2: torch 2.x headers need C++17
    sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' "$SRC/CMakeLists.txt" "$SRC/horovod/torch/CMakeLists.txt"
    grep -q "CMAKE_CXX_STANDARD 17" "$SRC/horovod/torch/CMakeLists.txt" \
      || { echo "setup: could not patch Horovod's C++ standard" >&2; exit 1; }
    mkdir -p "$WHEELDIR.tmp"
    # fix 1: CMake >= 4 refuses Horovod's old cmake_minimum_required without this
    ( cd "$SRC" && CMAKE_POLICY_VERSION_MINIMUM=3.5 HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 \
        HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=MPI \
        MAKEFLAGS="-j$(nproc)" "$VPY" -m pip wheel -q --no-build-isolation --no-deps -w "$WHEELDIR.tmp" . )
    rm -rf "$WHEELDIR" && mv "$WHEELDIR.tmp" "$WHEELDIR"
  else
    log "reusing cached Horovod wheel $WHEELDIR"
  fi
  "${PIP[@]}" "torch==$TORCH_VERSION" "$WHEELDIR"/horovod-*.whl
fi

# ---- 5. dynamix_hvd itself --------------------------------------------------------
log "pip install -e $REPO (builds the C++ extension)"
"${PIP[@]}" --no-build-isolation --no-deps -e "$REPO"

# ---- 6. checks -----------------------------------------------------------------------
CHECK="$("$VENV/bin/horovodrun" --check-build 2>&1)"
if ! grep -q "\[X\] PyTorch" <<<"$CHECK" || ! grep -q "\[X\] MPI" <<<"$CHECK"; then
  echo "$CHECK" >&2
  echo "setup: horovodrun --check-build does not list PyTorch and MPI; delete $WHEELDIR and rerun" >&2
  exit 1
fi
"$VPY" -c "import dynamix_hvd._native" || { echo "setup: extension failed to import" >&2; exit 1; }
log "environment ready: $VENV"
