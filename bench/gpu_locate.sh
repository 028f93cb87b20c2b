#!/usr/bin/env bash
# Where inside the model on a GPU box with no Docker host (the lent H200), through the process runtime (issue 39):
# the hooked Transformers engine as local processes on CUDA in bf16 with eager attention, on the random-weight
# small-llama (0.4 B, hidden 2048, 8 layers) and tiny-moe (Qwen3-MoE, 8 experts, top-2) that
# scripts/make-tiny-models.py makes there; batch invariance on (the control) and off, concurrent batches of 16
# against the same prompts alone; then `orchestrator locate --probe` per cell: the first module whose rows split,
# the margin at the first flipped token, and the op probe at that module's shapes on the GPU. Usage:
#   bash bench/gpu_locate.sh OUT_DIR
#   (MODELS="small-llama tiny-moe", DEVICE=cuda, DTYPE=bfloat16, ENGINE_PYTHON=python3; on a CPU, DEVICE=cpu
#   DTYPE=float32 MODELS=tiny-llama ENGINE_PYTHON=<the transformers-serve venv's python> tries
#   the script on a CPU)
# python3 must have torch (CUDA), transformers, hydra-core, pyarrow and httpx (hydra travels as wheels on PYTHONPATH,
# docs/gpu-validation.md); the engine needs only torch and transformers.
set -uo pipefail
out=${1:?usage: gpu_locate.sh OUT_DIR}
export ORCHESTRATOR_CACHE_DIR=${ORCHESTRATOR_CACHE_DIR:-/tmp/orchestrator-cache}
models=${MODELS:-small-llama tiny-moe}
device=${DEVICE:-cuda}
dtype=${DTYPE:-bfloat16}
# shellcheck disable=SC2086  # the model names are words
python3 scripts/make-tiny-models.py --out "$ORCHESTRATOR_CACHE_DIR/models" --models $models || exit 1
for model in $models; do
  run=$out/$model
  overrides=()
  for arm in invariant variant; do
    overrides+=("arms.$arm.python=${ENGINE_PYTHON:-python3}" "arms.$arm.engine_args.model=/models/$model"
      "arms.$arm.engine_args.device=$device" "arms.$arm.engine_args.dtype=$dtype")
    [ "$device" = cuda ] && overrides+=("arms.$arm.gpus=all")
  done
  echo "=== $model"
  python3 -m orchestrator run study=locate_tiny runtime.venv_on_path=false "hydra.run.dir=$run" "~arms.planted" \
    "~study.variables.planted" protocol.phases.sequential.repeats=2 protocol.phases.concurrent.repeats=16 \
    protocol.phases.concurrent.batches=2 protocol.request.max_tokens=32 "${overrides[@]}" 2>&1 \
    | grep -v '^\[20' | grep -v '^\[.*\] [0-9]*/[0-9]* requests'
  for arm in invariant variant; do
    for prompt in capital count; do
      echo "--- $model $arm/$prompt/concurrent"
      python3 -m orchestrator locate "$run" --cell "$arm/$prompt/concurrent" --probe 2>&1 | tee "$run/locate-$arm-$prompt.txt"
    done
  done
done
