#!/usr/bin/env bash
# A float32 control beside bfloat16 on a GPU box with no Docker host, through the process runtime (issue 48 item
# 5): the hooked Transformers engine as local processes on CUDA serving the random-weight small-llama that
# scripts/make-tiny-models.py makes there; study control_hooked (bf16 batched, fp32 alone, the control), 16
# repeats a phase, batches of 16. Usage:
#   bash bench/gpu_control.sh OUT_DIR
# python3 must have torch (CUDA), transformers, hydra-core, pyarrow and httpx (hydra travels as wheels on
# PYTHONPATH, docs/gpu-validation.md).
set -uo pipefail
out=${1:?usage: gpu_control.sh OUT_DIR}
export ORCHESTRATOR_CACHE_DIR=${ORCHESTRATOR_CACHE_DIR:-/tmp/orchestrator-cache}
python3 scripts/make-tiny-models.py --out "$ORCHESTRATOR_CACHE_DIR/models" --models small-llama || exit 1
overrides=()
for arm in bf16 fp32; do
  overrides+=("arms.$arm.python=python3" "arms.$arm.engine_args.model=/models/small-llama"
    "arms.$arm.engine_args.device=cuda" "arms.$arm.gpus=all")
done
python3 -m orchestrator run study=control_hooked runtime.venv_on_path=false "hydra.run.dir=$out/control_hooked" \
  protocol.phases.sequential.repeats=16 protocol.phases.concurrent.repeats=16 protocol.phases.concurrent.batches=2 \
  protocol.request.max_tokens=64 "${overrides[@]}" 2>&1 | grep -v '^\[20' | grep -v '^\[.*\] [0-9]*/[0-9]* requests'
sed -n '/## Drift from the control/,/^## Pooled/p' "$out/control_hooked/report.md"
