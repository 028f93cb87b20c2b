#!/usr/bin/env bash
# Build the images the default study needs, locally (no registry is assumed). Idempotent: skips what
# is up to date. Usage: build-images.sh PYTHON   (the venv's python, used to fill the image's site/)
set -euo pipefail
python=${1:?usage: build-images.sh PYTHON}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/common.sh"
log() { echo "[images] $*" >&2; }
base=${BASE_IMAGE:-orchestrator/debian-python:bookworm}
engine_image=orchestrator/reference-engine:0.1.0
src=$root/arms/reference-engine
site=$cache_dir/reference-engine/site  # torch + numpy for the image's Python 3.11
ctx=$cache_dir/reference-engine/context  # assembled here: Dockerfile, refengine/, site/

if [ -z "${BASE_IMAGE:-}" ]; then
  bash "$root/scripts/build-base-image.sh" "$base"
fi

if [ ! -d "$site/torch" ] || [ ! -d "$site/numpy" ]; then
  log "Filling $site with torch (CPU build) and numpy for the image's Python 3.11 (about 30 s)..."
  rm -rf "$site" && mkdir -p "$site"
  "$python" -m pip install -q --disable-pip-version-check --target "$site" torch==2.13.0 numpy 2>&1 \
    | grep -v "^WARNING: Location" || true
  rm -rf "$site/bin"
  [ -d "$site/torch" ] && [ -d "$site/numpy" ] || { log "could not install torch and numpy into $site"; exit 1; }
fi

sources_hash=$(cd "$src" && find Dockerfile refengine -name '*.py' -o -name Dockerfile | sort | xargs sha256sum \
  | sha256sum | cut -c1-16)
stamp=$cache_dir/reference-engine/image.stamp
if docker image inspect "$engine_image" >/dev/null 2>&1 && [ "$(cat "$stamp" 2>/dev/null)" = "$sources_hash-$base" ]; then
  exit 0
fi
log "Building $engine_image from $src (base $base, context $ctx)..."
rm -rf "$ctx" && mkdir -p "$ctx"
cp "$src/Dockerfile" "$ctx/" && cp -r "$src/refengine" "$ctx/refengine"
find "$ctx/refengine" -name __pycache__ -prune -exec rm -rf {} +
cp -al "$site" "$ctx/site" 2>/dev/null || cp -a "$site" "$ctx/site"  # hard links: no second copy of torch
DOCKER_BUILDKIT=1 docker build -q --build-arg "BASE_IMAGE=$base" -t "$engine_image" "$ctx" >/dev/null \
  || { log "docker build of $engine_image failed (run it without -q to see why)"; exit 1; }
rm -rf "$ctx"
echo "$sources_hash-$base" > "$stamp"
log "Built $engine_image"
