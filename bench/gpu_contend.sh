#!/usr/bin/env bash
# Kernel probes alone and under contention on one GPU (issue 48 item 6): the GEMM probe (q_proj- and down-like
# shapes, bf16 and FP8 rowwise, M 1/64/4096) and the ops probe (RMSNorm, log_softmax + top-k over 152k, decode
# attention at 8k context), 200 repeats each with the allocator perturbed, three ways: alone, with a second
# process busy on the same GPU (a 4096^2 fp32 matmul loop), and with a second CUDA stream of the probe's own
# process busy the same way. Then one line per cell and way: distinct digests over the repeats, the row-0
# check against M=1, seconds per call. Runs as local processes (no Docker; stdlib + torch + pyarrow),
# more than 250 s on an H100 (docs/gpu-validation.md: its last probe did not fit). From the repository root:
#   bash bench/gpu_contend.sh OUT_DIR        (DEVICE=cpu tries it on a CPU: alone and process only)
set -uo pipefail
out=${1:?usage: gpu_contend.sh OUT_DIR}
device=${DEVICE:-cuda}
ways="none process stream"
[ "$device" = cpu ] && ways="none process"
gemm_shapes='{"q_proj": [4096, 4096], "down": [14336, 4096]}'
ops='{"rmsnorm_4096": {"op": "rmsnorm", "hidden": 4096, "m": [1, 64, 1024]},
 "sampling_152k": {"op": "log_softmax_topk", "vocab": 151936, "top_k": 20, "m": [1, 64]},
 "decode_ctx8k": {"op": "decode_attention", "heads": 32, "kv_heads": 8, "head_dim": 128, "context": 8192,
                  "m": [1, 16, 64]}}'
gemm_m='[1, 64, 4096]'
common=(--local --set processes=1 --set repeats=200 --set hash_repeats=2 --set perturb_allocator=true
        --set "device=$device")
if [ "$device" = cpu ]; then  # the same steps at sizes a CPU finishes in a minute
  gemm_shapes='{"tiny": [256, 256]}'; gemm_m='[1, 8]'; common+=(--set repeats=20)
  ops='{"rmsnorm_256": {"op": "rmsnorm", "hidden": 256, "m": [1, 8]}}'
fi
for way in $ways; do
  contend=()
  [ "$way" != none ] && contend=(--contend "$way")
  echo "=== $way"
  python3 -m orchestrator probe --preset h200_default "${common[@]}" --set "shapes=$gemm_shapes" \
    --set 'arms=["bf16", "fp8_rowwise"]' --set "m=$gemm_m" "${contend[@]}" --out "$out/gemm-$way" \
    > "$out-gemm-$way.log" 2>&1 || echo "gemm $way: exit $? (see $out-gemm-$way.log)"
  python3 -m orchestrator probe --preset ops_h200 "${common[@]}" --set "ops=$ops" --set 'm=[1, 64]' \
    "${contend[@]}" --out "$out/ops-$way" > "$out-ops-$way.log" 2>&1 || echo "ops $way: exit $? (see $out-ops-$way.log)"
done
python3 - "$out" $ways <<'PY'
import sys
from pathlib import Path

import pyarrow.parquet as pq

out, ways = Path(sys.argv[1]), sys.argv[2:]
print("| probe | cell | arm | M | way | contending matmuls | distinct digests / repeats | row 0 = M=1 | s per call |")
print("| --- | --- | --- | ---: | --- | ---: | ---: | --- | ---: |")
for probe in ("gemm", "ops"):
    tables = {w: pq.read_table(out / f"{probe}-{w}" / "data" / "probes").to_pylist()
              for w in ways if (out / f"{probe}-{w}" / "data" / "probes").is_dir()}
    first = next(iter(tables.values()), [])
    for cell in first:
        for way, rows in tables.items():
            for r in rows:
                if (r["shape"], r["arm"], r["M"]) == (cell["shape"], cell["arm"], cell["M"]):
                    per = r["device_s_per_call"]
                    print(f"| {probe} | {r['shape']} | {r['arm']} | {r['M']} | {way} | {r['contend_matmuls']} | "
                          f"{r['distinct_digests']} / {r['repeats']} | {r['row0_bits_equal_m1']} | "
                          f"{'unsupported' if r['unsupported'] else f'{per:.3g}' if per else '-'} |")
PY
