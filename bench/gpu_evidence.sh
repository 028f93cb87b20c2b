#!/usr/bin/env bash
# The raw data behind docs/gpu-validation.md's "Where inside the model" and docs/probes.md's attribution on a GPU
# (issue 45, item 9): both runs in one device call, each run dir kept whole (record, report.json, locate output).
#   bash bench/gpu_evidence.sh OUT_DIR     # writes OUT_DIR/gpu_evidence.log and OUT_DIR/gpu_evidence.tar.gz
# (every run dir but its digests tables)
# python3 must have torch (CUDA), transformers, pyarrow, httpx, and the orchestrator's wheels on PYTHONPATH
# (docs/gpu-validation.md).
set -uo pipefail
out=${1:?usage: gpu_evidence.sh OUT_DIR}
work=$(mktemp -d)
mkdir -p "$out"
{
  echo "=== environment"
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch, transformers, pyarrow; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'pyarrow', pyarrow.__version__)"
  git rev-parse HEAD 2>/dev/null || true
  echo "=== timeout ${LOCATE_S:-400} bash bench/gpu_locate.sh $work/locate"
  timeout "${LOCATE_S:-400}" bash bench/gpu_locate.sh "$work/locate"
  echo "=== attribution: study=batch_invariance as processes on the GPU, then probe --preset ops_h200 --arm variant"
  run=$work/attribution
  python3 -m orchestrator run study=batch_invariance runtime=process arm@arms.invariant=reference_process \
    arm@arms.variant=reference_process arms.invariant.gpus=all arms.variant.gpus=all \
    +arms.variant.env.VLLM_BATCH_INVARIANT=0 "hydra.run.dir=$run" 2>&1 | grep -v '^\[.*\] [0-9]*/[0-9]* requests'
  echo "exit $?"
  timeout 120 python3 -m orchestrator probe --preset ops_h200 --arm variant --out "$run" --set processes=1 2>&1 | tail -40
  echo "exit $?"
  python3 -m orchestrator compare "$run" 2>&1 | tail -20
  python3 -m orchestrator show "$run" 2>&1 | tee "$run/show.txt"
} 2>&1 | tee "$out/gpu_evidence.log"
# the digests tables (25 MB for both models) stay behind: the locate output in the log quotes what they showed
tar -C "$work" --exclude='digests' -czf "$out/gpu_evidence.tar.gz" .
ls -la "$out"
