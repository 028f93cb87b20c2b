#!/usr/bin/env bash
# The reference-engine studies through the orchestrator's local-process runtime on a GPU box with no
# Docker host (the lent H200): every arm a local process on the GPU (bf16). Usage:
#   bash bench/gpu_process_studies.sh OUT_DIR [STUDY ...]   (default: default fused_finalize batch_invariance)
# python3 must have torch, hydra-core, pyarrow and httpx.
set -uo pipefail
out=${1:?usage: gpu_process_studies.sh OUT_DIR [STUDY ...]}
shift
studies=${*:-default fused_finalize batch_invariance}
declare -A overrides=(
  [default]="arm@arms.baseline=reference_process arm@arms.wide_batch=reference_process arms.baseline.gpus=all
    arms.wide_batch.gpus=all protocol.phases.sequential.repeats=31 protocol.phases.concurrent.repeats=30
    protocol.phases.concurrent.batches=1"
  [fused_finalize]="arm@arms.unfused=reference_process arm@arms.fused=reference_process arms.unfused.gpus=all
    arms.fused.gpus=all +arms.fused.engine_args.fused-finalize=true"
  [batch_invariance]="arm@arms.invariant=reference_process arm@arms.variant=reference_process
    arms.invariant.gpus=all arms.variant.gpus=all +arms.variant.env.VLLM_BATCH_INVARIANT=0"
)
for study in $studies; do
  echo "=== $study"
  # shellcheck disable=SC2086  # the overrides are words
  python3 -m orchestrator run "study=$study" runtime=process "hydra.run.dir=$out/$study" ${overrides[$study]} 2>&1 \
    | grep -v '^\[20' | grep -v '^\[.*\] [0-9]*/[0-9]* requests'
  # where each arm's engine really ran, from its own startup line in the record
  python3 -c "import pyarrow.parquet as pq; t = pq.read_table('$out/$study/data/logs').to_pylist(); \
print(sorted({(r['arm'], r['text'].split('] ', 1)[-1]) for r in t if 'refengine version' in r['text']}))"
done
