#!/usr/bin/env bash
# The hooked engine's batch-invariant kernels on a GPU box with no Docker host (issue 48, item 9), through the
# process runtime: the hooked Transformers engine as local processes on CUDA in bf16, on the random-weight
# small-llama (0.4 B, hidden 2048, 8 layers) that scripts/make-tiny-models.py makes there.
# (a) study locate_kernels: --invariant-kernels on (arm `kernels`) and off (`default`, the same static batches
#     with torch's kernels and eager attention), 2 sequential requests per prompt against 2 concurrent batches of
#     16, 32 tokens; then `orchestrator locate RUN --cell ARM/PROMPT/concurrent` per cell: "identical digests" or
#     the first module whose rows split.
# (b) study load_invariant_kernels: the default kernels (baseline) against the kernels at a short Poisson load
#     point (conf/protocol/load.yaml at RATE requests/s, 3 windows): the report's cost ratios with their intervals,
#     and the probes' divergence rates under that load, compared.
# Usage:
#   bash bench/gpu_invariant.sh OUT_DIR
#   (MODEL=small-llama, DEVICE=cuda, DTYPE=bfloat16, ENGINE_PYTHON=python3, RATE=4, RUNS=/tmp/gpu-invariant-runs;
#   on a CPU, DEVICE=cpu DTYPE=float32 MODEL=tiny-llama ENGINE_PYTHON=<the transformers-serve venv's python>
#   tries the script there)
# OUT_DIR gets two files: gpu_invariant.log (everything printed) and runs.tar.gz (both run dirs: record,
# report.json, report.md, guard.json, the locate outputs; not the digests tables, which locate's outputs quote).
# python3 must have torch (CUDA), transformers, hydra-core, pyarrow and httpx (hydra travels as wheels on
# PYTHONPATH, docs/gpu-validation.md); the engine needs only torch and transformers.
set -uo pipefail
out=${1:?usage: gpu_invariant.sh OUT_DIR}
export ORCHESTRATOR_CACHE_DIR=${ORCHESTRATOR_CACHE_DIR:-/tmp/orchestrator-cache}
model=${MODEL:-small-llama}
device=${DEVICE:-cuda}
dtype=${DTYPE:-bfloat16}
runs=${RUNS:-/tmp/gpu-invariant-runs}
mkdir -p "$out" "$runs"
exec > >(tee "$out/gpu_invariant.log") 2>&1
date -u
"${ENGINE_PYTHON:-python3}" -c "import torch, transformers; print('engine: torch', torch.__version__, 'transformers',
transformers.__version__, 'device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'cpu')"
python3 scripts/make-tiny-models.py --out "$ORCHESTRATOR_CACHE_DIR/models" --models "$model" || exit 1
overrides=(runtime.venv_on_path=false)
for arm in kernels default; do
  overrides+=("arms.$arm.python=${ENGINE_PYTHON:-python3}" "arms.$arm.engine_args.model=/models/$model"
    "arms.$arm.engine_args.device=$device" "arms.$arm.engine_args.dtype=$dtype")
  [ "$device" = cuda ] && overrides+=("arms.$arm.gpus=all")
done
quiet() { grep --line-buffered -v -e '^\[20' -e '^\[.*\] [0-9]*/[0-9]* requests'; }  # no progress lines

echo "=== (a) locate: $model, kernels on and off, batches of 16 against alone"
rm -rf "$runs/locate"
SECONDS=0
python3 -m orchestrator run study=locate_kernels "hydra.run.dir=$runs/locate" protocol.phases.sequential.repeats=2 \
  protocol.phases.concurrent.repeats=16 protocol.phases.concurrent.batches=2 protocol.request.max_tokens=32 \
  "${overrides[@]}" 2>&1 | quiet
for arm in kernels default; do
  for prompt in capital count; do
    echo "--- $arm/$prompt/concurrent"
    python3 -m orchestrator locate "$runs/locate" --cell "$arm/$prompt/concurrent" 2>&1 \
      | tee "$runs/locate/locate-$arm-$prompt.txt"
  done
done
echo "(a) took $SECONDS s"

echo "=== (b) load point: $model, default kernels (A) against batch-invariant kernels (B), ${RATE:-4} requests/s"
rm -rf "$runs/load"
SECONDS=0
python3 -m orchestrator run study=load_invariant_kernels "hydra.run.dir=$runs/load" \
  protocol.phases.load.load.windows=3 "protocol.phases.load.load.rate_per_s=${RATE:-4}" "${overrides[@]}" 2>&1 \
  | quiet
echo "--- the cost and the probes' divergence (report.md)"
grep -E "Costs at" "$runs/load/report.md"
awk '/^## /{on = ($0 ~ /^## (What B costs against A|Divergence rates compared)/)} on && /^\|/' "$runs/load/report.md"
echo "(b) took $SECONDS s"

tar -czf "$out/runs.tar.gz" -C "$runs" --exclude=data/digests locate load
date -u
