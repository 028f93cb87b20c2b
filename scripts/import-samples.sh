#!/usr/bin/env bash
# The committed samples of `orchestrator import` (tests/data/import/), made by the real tools against the reference
# engine: detLLM's own `check` (scripts/detllm_openai.py) with the fused finalize off and on, and curl's answers
# saved one file each (with the request beside them, and without: grouped by their prompt_token_ids); chat answers
# of `transformers serve` where `make transformers-serve` installed it; with
# VPP_COLLECTOR=/path/to/vllm-position-parity/collect_client.py (ZC502's collector, not shipped here), its evidence,
# sequential and concurrent, from an engine whose indexer budget (16) the prompt exceeds. docs/import.md.
#   [VPP_COLLECTOR=...] scripts/import-samples.sh [OUT]      (default tests/data/import)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-tests/data/import}
py=${PYTHON:-.venv/bin/python}
prompts=("The capital of France is" "Count from one to ten: one, two,")
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
serve() {  # PORT FLAGS...: a reference engine on 127.0.0.1, ready
  local port=$1; shift
  PYTHONPATH=arms/reference-engine "$py" -m refengine --host 127.0.0.1 --port "$port" --served-model-name reference \
    "$@" >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && return; sleep 0.2; done
  echo "the reference engine on port $port did not start" >&2; exit 1
}
serve 18441 --no-fused-finalize
serve 18442 --fused-finalize
rm -rf "$out"; mkdir -p "$out"
for tier in 1 2; do
  for arm in off:18441 on:18442; do
    PYTHONPATH=. "$py" scripts/detllm_openai.py --url "http://127.0.0.1:${arm#*:}" --out "$out/detllm/fused_${arm%%:*}_tier$tier" \
      --runs 5 --tier "$tier" --vary-batch 4 --max-new-tokens 8 "${prompts[@]}" >/dev/null
  done
done
mkdir -p "$out/openai/completions" "$out/openai/token_ids"
for p in 0 1; do
  for r in 0 1 2; do
    body=$(printf '{"model": "reference", "prompt": %s, "max_tokens": 8, "temperature": 0, "logprobs": 5}' \
      "$("$py" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "${prompts[$p]}")")
    echo "$body" > "$out/openai/completions/p${p}_r$r.request.json"
    curl -sf http://127.0.0.1:18442/v1/completions -H 'Content-Type: application/json' -d "$body" \
      -o "$out/openai/completions/p${p}_r$r.json"
    ids=${body%\}}', "return_token_ids": true}'  # no request kept: the answer's prompt_token_ids group it
    curl -sf http://127.0.0.1:18442/v1/completions -H 'Content-Type: application/json' -d "$ids" \
      -o "$out/openai/token_ids/answer_p${p}_r$r.json"
  done
done
# chat answers, from `transformers serve` (make transformers-serve) on tiny-llama: its chat answers carry no logprobs
tserve=${TRANSFORMERS_PYTHON:-$HOME/.cache/orchestrator/transformers-serve-5.25.0/venv/bin/python}
model=${ORCHESTRATOR_CACHE_DIR:-$HOME/.cache/orchestrator}/models/tiny-llama
if [[ -x "$tserve" && -d "$model" ]]; then
  HF_HUB_OFFLINE=1 "$tserve" -m transformers.cli.transformers serve --host 127.0.0.1 --port 18444 >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do curl -sf http://127.0.0.1:18444/v1/models >/dev/null && break; sleep 0.2; done
  mkdir -p "$out/openai/chat"
  for p in 0 1; do
    for r in 0 1 2; do
      body=$("$py" -c 'import json,sys; print(json.dumps({"model": sys.argv[1], "messages": [{"role": "user",
        "content": sys.argv[2]}], "max_tokens": 8, "temperature": 0, "logprobs": True, "top_logprobs": 5}))' \
        "$model" "${prompts[$p]}")
      echo "$body" > "$out/openai/chat/p${p}_r$r.request.json"
      curl -sf http://127.0.0.1:18444/v1/chat/completions -H 'Content-Type: application/json' -d "$body" \
        -o "$out/openai/chat/p${p}_r$r.json"
    done
  done
fi
if [[ -n "${VPP_COLLECTOR:-}" ]]; then
  serve 18443 --indexer-budget 16 --topk-tiebreak random
  for mode in sequential concurrent; do
    "$py" "$VPP_COLLECTOR" --base-url http://127.0.0.1:18443 --model reference --arm budget16 --execution-mode "$mode" \
      --prompt "Count from one to ten: one, two, three, four, five," --repeats 4 --max-tokens 8 --prompt-logprobs 3 \
      --out "$out/parity/$mode.json" >/dev/null
  done
fi
