#!/usr/bin/env bash
# `locate` in two scoped runs on a GPU box (docs/locate.md, "Inside a realistic load"): the hooked engine as a
# local process on CUDA in bf16, batch invariance off, on the random-weight small-llama; first the decoder layers
# only (digest-depth 3), then inside the layer `locate` named, with the overrides its `look inside:` line gives.
# Usage: bash bench/gpu_locate_scoped.sh OUT_DIR   (the wheels of docs/gpu-validation.md on PYTHONPATH)
set -uo pipefail
out=${1:?usage: gpu_locate_scoped.sh OUT_DIR}
export ORCHESTRATOR_CACHE_DIR=${ORCHESTRATOR_CACHE_DIR:-/tmp/orchestrator-cache}
python3 scripts/make-tiny-models.py --out "$ORCHESTRATOR_CACHE_DIR/models" --models small-llama || exit 1
study=(study=locate_tiny runtime.venv_on_path=false "~arms.planted" "~arms.invariant" "~study.variables.planted"
  "~study.variables.variant" study.baseline=variant protocol.phases.sequential.repeats=2
  protocol.phases.concurrent.repeats=16 protocol.phases.concurrent.batches=2 protocol.request.max_tokens=32
  arms.variant.python=python3 arms.variant.engine_args.model=/models/small-llama arms.variant.engine_args.device=cuda
  arms.variant.engine_args.dtype=bfloat16 arms.variant.gpus=all)
scope=(+arms.variant.engine_args.digest-depth=3)
for pass in layers inside; do
  echo "=== $pass: ${scope[*]}"
  python3 -m orchestrator run "${study[@]}" "${scope[@]}" "hydra.run.dir=$out/$pass" 2>&1 \
    | grep -v '^\[20' | grep -v '^\[.*\] [0-9]*/[0-9]* requests'
  python3 -m orchestrator locate "$out/$pass" --cell variant/capital/concurrent 2>&1 | tee "$out/locate-$pass.txt"
  # shellcheck disable=SC2207  # the overrides are words
  scope=($(sed -n 's/^look inside: .* run the study again with //p' "$out/locate-$pass.txt"))
  [ ${#scope[@]} -gt 0 ] || break
done
