#!/usr/bin/env bash
# transformers serve studies on a GPU box with no Docker host (the lent H200), through the process
# runtime: every arm `transformers serve` as a local process on the GPU, in bf16, serving the random-weight
# small-llama (0.4 B, hidden 2048, 8 layers) made there by scripts/make-tiny-models.py. Usage:
#   bash bench/gpu_transformers.sh OUT_DIR [STUDY ...]
#   (default: transformers_repeatability transformers_attention; ORCHESTRATOR_VERB=plan shows the commands;
#   ARMS="plain eager" swaps only those arms, EXTRA="..." adds overrides, e.g. "~arms.cb ~study.variables.cb")
# python3 must have torch (CUDA), transformers with its serving extras, hydra-core, pyarrow and httpx; the
# serving extras and hydra travel as wheels on PYTHONPATH (docs/gpu-validation.md), which the arms inherit.
set -uo pipefail
out=${1:?usage: gpu_transformers.sh OUT_DIR [STUDY ...]}
shift
studies=${*:-transformers_repeatability transformers_attention}
export ORCHESTRATOR_CACHE_DIR=${ORCHESTRATOR_CACHE_DIR:-/tmp/orchestrator-cache}
python3 scripts/make-tiny-models.py --out "$ORCHESTRATOR_CACHE_DIR/models" --models small-llama || exit 1
# `python3 -m transformers.cli.transformers serve` where that module runs as a script, else the console script
if python3 -c 'import transformers.cli.transformers' 2>/dev/null; then
  serve="[python3,-m,transformers.cli.transformers,serve]"
else
  serve="[$(command -v transformers),serve]"
fi
declare -A arms=(
  [transformers_repeatability]="cb"
  [transformers_attention]="sdpa eager"
  [transformers_continuous_batching]="plain cb"
  [transformers_load]="plain cb eager"
  [transformers_load_cost]="cb plain"
  [transformers_saturation]="cb plain"
  [onset_transformers_batch]="a"
)
declare -A protocol=(
  # continuous batching: batches of 8 and 64 run together
  [transformers_repeatability]="protocol.phases.sequential.repeats=32 protocol.phases.concurrent_8.batches=4
    protocol.phases.concurrent_64.batches=2 protocol.request.max_tokens=64"
  # without continuous batching the server answers one request at a time: fewer, shorter requests
  [transformers_attention]="protocol.phases.sequential.repeats=16 protocol.request.max_tokens=32"
  [transformers_continuous_batching]="protocol.phases.sequential.repeats=16 protocol.request.max_tokens=32"
  # three load points, as conf/protocol/transformers_load.yaml has them; no A/A (one device call's time)
  [transformers_load]="study.noise_floor=false"
)
for study in $studies; do
  echo "=== $study"
  overrides=()
  for arm in ${ARMS:-${arms[$study]}}; do
    overrides+=("arm@arms.$arm=transformers_serve_process" "arms.$arm.python=python3" "arms.$arm.command=$serve"
      "arms.$arm.gpus=all" "arms.$arm.engine_args.model=/models/small-llama" "arms.$arm.engine_args.device=cuda" "arms.$arm.engine_args.dtype=bfloat16"
      "+arms.$arm.env.PYTHONPATH=${PYTHONPATH:-}")
  done
  # the study's own choices (eager, continuous batching) come from its preset, after the template swap
  # shellcheck disable=SC2086  # the protocol overrides are words
  python3 -m orchestrator "${ORCHESTRATOR_VERB:-run}" "study=$study" runtime=process "hydra.run.dir=$out/$study" \
    "hydra.sweep.dir=$out/$study" "${overrides[@]}" ${protocol[$study]:-} ${EXTRA:-} 2>&1 | grep -v '^\[20' | grep -v '^\[.*\] [0-9]*/[0-9]* requests'
done
