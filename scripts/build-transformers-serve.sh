#!/usr/bin/env bash
# Hugging Face `transformers serve` for studies on a second real engine: a cached venv (doubles as the
# process runtime's interpreter), the tiny random models, the image orchestrator/transformers-serve, and on it
# the hooked engine's image orchestrator/transformers-hooked.
# Everything lives in the cache dir, outside the source tree. Idempotent: skips what is up to date.
# Usage: build-transformers-serve.sh PYTHON [--no-image]   (PYTHON: a Python 3.11, the base of the venv)
set -euo pipefail
python=${1:?usage: build-transformers-serve.sh PYTHON [--no-image]}
build_image=1
[ "${2:-}" = --no-image ] && build_image=0
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/common.sh"  # cache_dir, docker
source "$root/scripts/engine-build.sh"  # engine_venv, engine_image
log() { echo "[transformers-serve] $*" >&2; }
version=5.25.0
# torch pinned: a CPU wheel lies on this disk; unpinned, pip would download a multi-GB CUDA build.
spec="transformers[serving]==$version torch==2.13.0"
recipe="$spec"
dir=$cache_dir/transformers-serve-$version
venv=$dir/venv
base=${BASE_IMAGE:-orchestrator/debian-python:bookworm}
image=orchestrator/transformers-serve:$version

engine_venv "$python" "$venv" "$recipe" 'import transformers; print(transformers.__version__)' "$version" $spec
HF_HUB_OFFLINE=1 "$venv/bin/python" "$root/scripts/make-tiny-models.py" --out "$cache_dir/models" >&2
[ "$build_image" = 1 ] || exit 0
engine_image "$root/arms/transformers-serve/Dockerfile" "$dir" "$image" "$base" "$recipe"
# the hooked Transformers engine (arms/transformers-hooked) on this image: seconds, rebuilt when its code changes
bash "$root/scripts/build-transformers-hooked.sh" "$image"
