#!/usr/bin/env bash
# Issue 62's GPU check in one go: benchmarks/real_pipeline.py on CUDA in both
# settings (starved: ResNet-18 on JPEGs of 640x480; model-bound: ResNet-50 on
# JPEGs of 160x120), each with every row part 5 compares (DataLoader with
# pin_memory=True, the persistent DataLoader, torchdata.nodes, the Prefetcher
# without and with its device stage): 14 workers, batch 96, 2 epochs of 25
# batches, 2 interleaved rounds. About 6 minutes on one H200 with 16 cores; each
# setting is stopped after QUEUETUNE_CHECK_LIMIT seconds (230), so the whole
# stays under 8 minutes.
#
#   OUT=/some/folder benchmarks/device_check.sh    # results into $OUT
#   benchmarks/device_check.sh                     # results into benchmarks/results/
#
# It writes real_pipeline_cuda.{json,txt} (starved) and
# real_pipeline_cuda.model-bound.{json,txt}, and with $OUT each setting's log there (.log).
# Python: $PYTHON, else python3. Where torchdata does not import, its row is
# skipped with a note; to add it, put its wheel in .whl/ first (pip download
# --no-deps torchdata==0.11.0 -d .whl): it is installed into /tmp/site.
set -uo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
out=${OUT:-benchmarks/results}
limit=${QUEUETUNE_CHECK_LIMIT:-230}
mkdir -p "$out"
export PYTHONPATH=src:examples PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl &&
        export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
loaders=torch,torch-persistent,torchdata.nodes,prefetcher,prefetcher-device
common=(--device cuda --loaders "$loaders" --workers 14 --batch 96 --epoch-batches 25 --epochs 2 --rounds 2)
status=0
for setting in starved model-bound; do
    size=()
    [ "$setting" = starved ] && size=(--size 640x480)
    stem=real_pipeline_cuda$([ "$setting" = starved ] || echo ".$setting")
    echo "== $setting (at most $limit s)" >&2
    timeout "$limit" "$python" benchmarks/real_pipeline.py "${common[@]}" --setting "$setting" "${size[@]}" \
        --out "$out" 2>&1 | tee "${OUT:-/tmp}/$stem.log"
    code=${PIPESTATUS[0]}
    [ "$code" = 0 ] || { echo "== $setting ended with exit code $code" >&2; status=$code; }
done
exit "$status"
