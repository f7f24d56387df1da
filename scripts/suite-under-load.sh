#!/usr/bin/env bash
# Runs the test suite several times in a row with CPU hogs beside it, as the flakiness check
# of docs/BENCHMARKS.md ("test suite on the 2-core machine") does: each hog is a busy loop on
# one core for the whole series; every run's wall time and outcome is printed and appended to
# LOG. Stops the hogs however it ends.
#
#   scripts/suite-under-load.sh                 # 3 runs of `make test`, 2 hogs
#   RUNS=1 HOGS=2 scripts/suite-under-load.sh
#   scripts/suite-under-load.sh .venv/bin/python -m pytest -q tests   # another command
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
HOGS=${HOGS:-2}
LOG=${LOG:-suite-under-load.log}
CMD=("$@")
[ ${#CMD[@]} -eq 0 ] && CMD=(make test)

hogs=()
child=
cleanup() {
  [ -n "$child" ] && kill -- -"$child" 2>/dev/null
  [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$HOGS"); do
  python3 -c 'while True: pass' &
  hogs+=($!)
done
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $HOGS hog(s), $RUNS run(s): ${CMD[*]}" | tee -a "$LOG"
failed=0
for i in $(seq "$RUNS"); do
  start=$(date +%s)
  setsid "${CMD[@]}" > "$LOG.run$i" 2>&1 &  # its own group: stopped whole with the series
  child=$!
  wait "$child"
  rc=$?
  child=
  took=$(( $(date +%s) - start ))
  summary=$(grep -E "(passed|failed|error)" "$LOG.run$i" | tail -1)
  echo "run $i: exit $rc in ${took} s; load average $(cut -d' ' -f1-3 /proc/loadavg): $summary" | tee -a "$LOG"
  grep -E "^(FAILED|ERROR) " "$LOG.run$i" | sed 's/^/  /' | tee -a "$LOG"  # which, if any
  [ "$rc" -ne 0 ] && failed=$((failed + 1))
done
echo "$failed of $RUNS run(s) failed" | tee -a "$LOG"
[ "$failed" -eq 0 ]
