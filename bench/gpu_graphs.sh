#!/usr/bin/env bash
# CUDA graphs and torch.compile as variables on a GPU box with no Docker host (the lent H100/H200), through the
# process runtime (issue 48): study hooked_graphs_compile, the hooked Transformers engine as local processes on
# CUDA in bf16 on the random-weight small-llama (0.4 B, hidden 2048, 8 layers) that scripts/make-tiny-models.py makes
# there; eager code (the baseline) against its forward replayed as CUDA graphs, then against torch.compile, one run
# each (OUT_DIR/graphs, OUT_DIR/compile, each with its own eager baseline): the answers of each against eager, and
# the cost at a load point (the report's "What B costs against A"). Usage:
#   bash bench/gpu_graphs.sh OUT_DIR
#   (ARMS="graphs compile": one run per arm named, so each may be its own call; MODEL=small-llama, DEVICE=cuda,
#   DTYPE=bfloat16, ENGINE_PYTHON=python3, EXTRA="..." more overrides; ORCHESTRATOR_VERB=plan shows the commands;
#   on a CPU, ARMS=compile DEVICE=cpu DTYPE=float32 MODEL=tiny-llama ENGINE_PYTHON=<the transformers-serve venv's
#   python>: CUDA graphs need a GPU, and the engine refuses them on a CPU in one line)
# python3 must have torch (CUDA), transformers, hydra-core, pyarrow and httpx (hydra travels as wheels on PYTHONPATH,
# docs/gpu-validation.md); the engine needs only torch and transformers.
set -uo pipefail
out=${1:?usage: gpu_graphs.sh OUT_DIR}
export ORCHESTRATOR_CACHE_DIR=${ORCHESTRATOR_CACHE_DIR:-/tmp/orchestrator-cache}
model=${MODEL:-small-llama}
device=${DEVICE:-cuda}
python3 scripts/make-tiny-models.py --out "$ORCHESTRATOR_CACHE_DIR/models" --models "$model" || exit 1
for arm in ${ARMS:-graphs compile}; do
  other=$([ "$arm" = graphs ] && echo compile || echo graphs)
  overrides=()
  for each in eager "$arm"; do
    overrides+=("arms.$each.python=${ENGINE_PYTHON:-python3}" "arms.$each.engine_args.model=/models/$model"
      "arms.$each.engine_args.device=$device" "arms.$each.engine_args.dtype=${DTYPE:-bfloat16}")
    [ "$device" = cuda ] && overrides+=("arms.$each.gpus=all")
  done
  echo "=== eager vs $arm"
  # shellcheck disable=SC2086  # EXTRA's overrides are words
  python3 -m orchestrator "${ORCHESTRATOR_VERB:-run}" study=hooked_graphs_compile runtime.venv_on_path=false \
    "hydra.run.dir=$out/$arm" "~arms.$other" "~study.variables.$other" "${overrides[@]}" ${EXTRA:-} 2>&1 \
    | grep -v '^\[20' | grep -v '^\[.*\] [0-9]*/[0-9]* requests'
done
