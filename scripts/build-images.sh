#!/usr/bin/env bash
# Build the images the default study needs, locally (no registry is assumed). Idempotent: skips what
# is up to date. Usage: build-images.sh PYTHON   (the venv's python, used to fill the image's site/)
set -euo pipefail
# The engine's own client (Debian's docker.io) builds with BuildKit without a buildx plugin.
docker() { if [ -x /usr/bin/docker ]; then /usr/bin/docker "$@"; else command docker "$@"; fi; }
python=${1:?usage: build-images.sh PYTHON}
root=$(cd "$(dirname "$0")/.." && pwd)
log() { echo "[images] $*" >&2; }
base=${BASE_IMAGE:-orchestrator/debian-python:bookworm}
engine_image=orchestrator/reference-engine:0.1.0
ctx=$root/arms/reference-engine
stamp_dir=$root/.build
mkdir -p "$stamp_dir"

if [ -z "${BASE_IMAGE:-}" ]; then
  bash "$root/scripts/build-base-image.sh" "$base"
fi

if [ ! -d "$ctx/site/torch" ] || [ ! -d "$ctx/site/numpy" ]; then
  log "Filling $ctx/site with torch (CPU build) and numpy for the image's Python 3.11..."
  find "$ctx/site" -mindepth 1 -maxdepth 1 ! -name .keep -exec rm -rf {} +
  "$python" -m pip install -q --disable-pip-version-check --target "$ctx/site" torch==2.13.0 numpy 2>&1 \
    | grep -v "^WARNING: Location" || true
  rm -rf "$ctx/site/bin"
  [ -d "$ctx/site/torch" ] && [ -d "$ctx/site/numpy" ] || { log "could not install torch and numpy into $ctx/site"; exit 1; }
fi

sources_hash=$(cd "$ctx" && find Dockerfile refengine -name '*.py' -o -name Dockerfile | sort | xargs sha256sum \
  | sha256sum | cut -c1-16)
if docker image inspect "$engine_image" >/dev/null 2>&1 \
   && [ "$(cat "$stamp_dir/reference-engine.stamp" 2>/dev/null)" = "$sources_hash-$base" ]; then
  exit 0
fi
log "Building $engine_image from $ctx (base $base)..."
DOCKER_BUILDKIT=1 docker build -q --build-arg "BASE_IMAGE=$base" -t "$engine_image" "$ctx" >/dev/null \
  || { log "docker build of $engine_image failed (run it without -q to see why)"; exit 1; }
echo "$sources_hash-$base" > "$stamp_dir/reference-engine.stamp"
log "Built $engine_image"
