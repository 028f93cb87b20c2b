#!/usr/bin/env bash
# The top-k tie grid on a GPU box (issue 48 item 3): conf/probe/ties_grid.yaml as a local process on CUDA, two
# processes with the same seed; torch.topk sorted and unsorted and the stable-sort control over 64..512
# experts, k 2 and 8, 0-50 % of rows tied at the k-th value, M 1..4096; the MoE probe routed per call with ties;
# the sampling op with ties. Usage, from the repository root:
#   bash bench/gpu_ties.sh OUT_DIR     # writes OUT_DIR/gpu_ties.log and OUT_DIR/ties_grid/ (probes.md, raw JSONL)
# python3 must have torch (CUDA) and pyarrow, and the orchestrator's wheels on PYTHONPATH
# (docs/gpu-validation.md: pip install --no-index --no-deps --target /tmp/site .whl/*.whl;
# export PYTHONPATH=/tmp/site:$PWD). SET="m=[1, 2, 3, 8]" passes one --set to the probe (a shorter try).
set -uo pipefail
out=${1:?usage: gpu_ties.sh OUT_DIR}
mkdir -p "$out"
sets=()
[ -n "${SET:-}" ] && sets=(--set "$SET")
{
  echo "=== environment"
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'device', torch.cuda.get_device_name() if torch.cuda.is_available() else 'none')"
  git rev-parse HEAD 2>/dev/null || true
  echo "=== python3 -m orchestrator probe --local --preset ties_grid --out $out/ties_grid ${sets[*]}"
  start=$(date +%s)
  timeout "${PROBE_S:-540}" python3 -m orchestrator probe --local --preset ties_grid --out "$out/ties_grid" "${sets[@]}"
  echo "exit $? after $(( $(date +%s) - start )) s"
  echo "=== python3 bench/ties_table.py $out/ties_grid --m 4096"
  python3 bench/ties_table.py "$out/ties_grid" --m 4096
} 2>&1 | tee "$out/gpu_ties.log"
rm -rf "$out/ties_grid/data"  # the Parquet table: `orchestrator probe --ingest` rebuilds it from the raw JSONL
ls -la "$out" "$out/ties_grid"
