#!/usr/bin/env bash
# The GPU backend's evidence on a CUDA machine, in one call (about 5 minutes on an H200):
# the `gpu`-marked tests (L1/L2 replays and the L3 replays with their disk stores) and
# benchmarks/gpu.py with both ways across the bus, every output written under $OUT.
#
# Two steps:
#   1. Here (a machine that reaches PyPI), once:  bash benchmarks/gpu_device_check.sh --fetch-wheels
#      It saves, under build/device-wheels/ (ignored by git), the wheels the device
#      machine lacks: its image has torch, numpy, typer, rich, pytest and hypothesis for
#      Python 3.12 but not immutables.
#   2. On the device machine, from the repository root, carrying build/device-wheels:
#      OUT=/some/dir bash benchmarks/gpu_device_check.sh
#
# Outputs: $OUT/env.txt (GPU, driver, versions, /dev/shm), $OUT/pytest-gpu.txt,
# $OUT/bench.jsonl (one JSON object per benchmark run, errors beside them),
# $OUT/summary.txt. The exit code
# is non-zero when any step failed; every step runs regardless.
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=build/device-wheels

if [[ "${1:-}" == "--fetch-wheels" ]]; then
  mkdir -p "$WHEELS"
  exec python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHEELS" 'immutables>=0.20,<0.22'
fi

: "${OUT:?set OUT to the folder for the outputs}"
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
status=0
step() {  # step NAME LOG COMMAND...: run, append its output to LOG, remember a failure
  local name=$1 log=$2; shift 2
  echo "== $name: $*" | tee -a "$OUT/summary.txt"
  local t0=$SECONDS
  "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
  [[ $rc -eq 0 ]] || status=1
}

if ! $PY -c 'import immutables' 2>/dev/null; then
  ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "immutables is missing and $WHEELS has no wheels: run --fetch-wheels first and carry $WHEELS" | tee -a "$OUT/summary.txt"; exit 2; }
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/kvsm-site "$WHEELS"/*.whl || exit 2
  export PYTHONPATH=/tmp/kvsm-site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv 2>&1
  $PY -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
  df -h /dev/shm /tmp 2>&1
  nproc
} >"$OUT/env.txt"
cat "$OUT/env.txt"
# Without CUDA the gpu tests would all be skipped and the step would pass: refuse.
$PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || {
  echo "CUDA is not available to $PY: nothing to check" | tee -a "$OUT/summary.txt"; exit 2; }

# The CUDA variants of the end-to-end tests (replays with direct and staged copies, a
# corrupted slab byte, a tampered rank; L3 replays spilling to and reloading from the
# per-rank disk stores under /tmp, a corrupted disk page).
step pytest-gpu "$OUT/pytest-gpu.txt" $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu_replay.py tests/test_gpu_l3.py -o addopts="-ra"

# The throughput target: transitions of >= 1024 pages of >= 64 KiB, both ways across the
# bus; then a larger shape with four ranks.
bench() { $PY benchmarks/gpu.py --json --device cuda "$@"; }
step bench-direct "$OUT/bench.jsonl" bench --io direct --ranks 2 --pages 1024 --page-bytes 65536 --layers 1 --cycles 4
step bench-staged "$OUT/bench.jsonl" bench --io staged --ranks 2 --pages 1024 --page-bytes 65536 --layers 1 --cycles 4
step bench-direct-r4 "$OUT/bench.jsonl" bench --io direct --ranks 4 --pages 2048 --page-bytes 16384 --layers 8 --cycles 3

echo "== overall exit $status" | tee -a "$OUT/summary.txt"
exit $status
