#!/usr/bin/env bash
# The test suite on a busy machine: one CPU-burning process per core (or
# QUEUETUNE_BURNERS of them) runs while the README's test command runs, so
# that a test that passes only on an idle machine shows itself. Arguments go
# to pytest, e.g. benchmarks/loaded_suite.sh -m faults
#
#   benchmarks/loaded_suite.sh                 # the whole suite, every core busy
#   QUEUETUNE_BURNERS=4 benchmarks/loaded_suite.sh tests/test_prefetcher.py
#
# It prints the burners' count, the suite's exit code and its wall time, and
# exits with the suite's code. The burners are stopped however the suite ends.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup
burners=${QUEUETUNE_BURNERS:-$(nproc)}
pids=()
stop_burners() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    wait 2>/dev/null
}
trap stop_burners EXIT
for _ in $(seq "$burners"); do
    .venv/bin/python -c 'while True: pass' &
    pids+=("$!")
done
echo "loaded_suite: $burners CPU-burning processes on $(nproc) cores" >&2
start=$(date +%s)
scripts/test "$@"
code=$?
echo "loaded_suite: pytest exit code $code after $(( $(date +%s) - start )) s with $burners burners" >&2
exit "$code"
