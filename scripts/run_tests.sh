#!/usr/bin/env bash
# Runs the whole test suite: unit tests, MPI tests under mpirun -np 1 and -np 4 (through
# `python -m mpi4py`, so an unhandled error on one rank aborts the job instead of hanging it),
# then the launcher tests (horovodrun -np 2 smoke). Prints one closing summary line.
set -uo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DYNAMIX_VENV:-$REPO/.venv}"
PY="$VENV/bin/python"
export PATH="$VENV/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export PYTHONDONTWRITEBYTECODE=1
OUT="$(mktemp -d)"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp --mca btl_tcp_if_include lo)
# Collective-timing library preloaded into every rank (tests/mpi/test_comm_*.py need it; other
# tests only get their collectives recorded). DYNAMIX_REQUIRE_PMPI=1 turns its absence into a
# failure instead of a skip.
if PMPI_LIB="$("$PY" -m dynamix_hvd.launch --print-preload 2>/dev/null)"; then
  MPIRUN+=(-x "LD_PRELOAD=$PMPI_LIB" -x DYNAMIX_REQUIRE_PMPI=1)
else
  echo "warning: libdynamix_pmpi.so not built; MPI collective-timing tests will fail" >&2
  MPIRUN+=(-x DYNAMIX_REQUIRE_PMPI=1)
fi
cd "$REPO"
status=0

stage() { echo; echo "==== $1"; }

stage "unit tests"
"$PY" -m pytest tests/unit -q -p no:cacheprovider --junitxml="$OUT/unit.xml" || status=1

for np in 1 4; do
  stage "MPI tests under mpirun -np $np"
  timeout 1200 "${MPIRUN[@]}" -np "$np" "$PY" -m mpi4py -m pytest tests/mpi -q -p no:cacheprovider \
      --junitxml="$OUT/mpi$np.xml" || status=1
done

stage "launcher tests (horovodrun, dynamix run)"
"$PY" -m pytest tests/launch -q -p no:cacheprovider --junitxml="$OUT/launch.xml" || status=1

"$PY" - "$OUT" "$status" <<'PYEOF'
import glob, sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for f in sorted(glob.glob(sys.argv[1] + "/*.xml")):
    for s in ET.parse(f).getroot().iter("testsuite"):
        t, fl, er, sk = (int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        passed += t - fl - er - sk; failed += fl + er; skipped += sk
if sys.argv[2] != "0" and failed == 0:
    failed = 1  # a stage crashed or timed out without writing its report
print(f"dynamix: {passed} passed, {failed} failed, {skipped} skipped")
PYEOF
rm -rf "$OUT"
exit $status
