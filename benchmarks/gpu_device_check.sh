#!/usr/bin/env bash
# The GPU backend's evidence on a CUDA machine, in one call: the `gpu`-marked tests
# (L1/L2 replays and the L3 replays with their disk stores) and benchmarks/gpu.py with
# both ways across the bus, every output written under $OUT. Each step has its own time
# limit (at most 450 s in all), so one hung step cannot take the others' time: call it
# with a timeout_s of about 480, which leaves room in a 15-minute device budget for the
# machine's start and nothing more; a rerun needs a fresh budget.
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
# the machine has no outside network: gloo binds loopback, not whatever the hostname resolves to
export GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}
status=0
step() {  # step NAME LIMIT_S LOG COMMAND...: run under a time limit, append its output to LOG, remember a failure
  local name=$1 limit=$2 log=$3; shift 3
  echo "== $name (limit ${limit} s): $*" | tee -a "$OUT/summary.txt"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$log"
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
  $PY -c 'import numpy, torch; torch.from_numpy(numpy.zeros(1)); print("numpy", numpy.__version__, "works with torch")' 2>&1
  df -h /dev/shm /tmp 2>&1
  nproc
} >"$OUT/env.txt"

# The largest benchmark slab is 2 GiB (4 ranks x 2 x 2048 pages x 128 KiB); a container's
# /dev/shm is often 64 MiB. Reserve that much once to find out, else put the slabs in /tmp.
SLAB_DIR=/dev/shm
if ! $PY -c 'import os, sys
p = "/dev/shm/kvsm-probe-%d" % os.getpid()
fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
try:
    os.posix_fallocate(fd, 0, (2 << 30) + (1 << 20))
finally:
    os.close(fd); os.unlink(p)' 2>/dev/null; then
  SLAB_DIR=/tmp
fi
echo "benchmark slabs in $SLAB_DIR" >>"$OUT/env.txt"
cat "$OUT/env.txt"
# Without CUDA the gpu tests would all be skipped and the step would pass: refuse.
$PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || {
  echo "CUDA is not available to $PY: nothing to check" | tee -a "$OUT/summary.txt"; exit 2; }

BENCH=("$PY" benchmarks/gpu.py --json --device cuda --slab-dir "$SLAB_DIR" --timeout 60)

# The throughput target first (transitions of >= 1024 pages of >= 64 KiB, both ways
# across the bus), then the CUDA variants of the end-to-end tests (replays with direct,
# staged and auto copies, a corrupted slab byte, a tampered rank; L3 replays spilling to
# and reloading from the per-rank disk stores under /tmp, a corrupted disk page), then
# staged copies and a larger shape with four ranks.
step bench-direct 75 "$OUT/bench.jsonl" "${BENCH[@]}" --io direct --ranks 2 --pages 1024 --page-bytes 65536 --layers 1 --cycles 4
step pytest-gpu 240 "$OUT/pytest-gpu.txt" "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu_replay.py tests/test_gpu_l3.py tests/test_defects.py -o addopts="-ra"
step bench-staged 60 "$OUT/bench.jsonl" "${BENCH[@]}" --io staged --ranks 2 --pages 1024 --page-bytes 65536 --layers 1 --cycles 4
step bench-direct-r4 75 "$OUT/bench.jsonl" "${BENCH[@]}" --io direct --ranks 4 --pages 2048 --page-bytes 16384 --layers 8 --cycles 3

echo "== overall exit $status" | tee -a "$OUT/summary.txt"
exit $status
