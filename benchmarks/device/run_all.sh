#!/usr/bin/env bash
# Runs every read-only device script on the lent H200 in one call and packs the results.
# Usage (device tool, repo root, carry .whl):  bash benchmarks/device/run_all.sh [script ...]
# NEVER add a script here that changes clocks, power limits, persistence/compute mode or MIG.
set -uo pipefail
: "${OUT:?OUT must be set}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export GRIDSHIFT_NVML_READ_ONLY=1 GRIDSHIFT_HOME="$(mktemp -d)"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
work="$(mktemp -d)"
log="$OUT/run_all.log"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.sm,clocks.mem,persistence_mode --format=csv
    python3 -c 'import torch, pynvml; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
} >"$log" 2>&1
scripts=("$@")
if [ ${#scripts[@]} -eq 0 ]; then
    scripts=(benchmarks/device/*.py benchmarks/device/*_status.sh)
fi
for s in "${scripts[@]}"; do
    [ -e "$s" ] || continue
    name="$(basename "$s")"; name="${name%.*}"
    mkdir -p "$work/$name"
    echo "=== $s ($(date -u +%T))" >>"$log"
    start=$(date +%s)
    if [[ "$s" == *.sh ]]; then
        OUT="$work/$name" timeout 300 bash "$s" >>"$log" 2>&1
    else
        OUT="$work/$name" timeout 300 python3 "$s" >>"$log" 2>&1
    fi
    echo "=== $s rc=$? in $(( $(date +%s) - start )) s" >>"$log"
done
# settings must be exactly as found: print them again for the record
nvidia-smi --query-gpu=power.limit,clocks.applications.graphics,persistence_mode --format=csv >>"$log" 2>&1
tar -C "$work" -czf "$OUT/results.tar.gz" .
