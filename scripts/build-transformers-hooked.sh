#!/usr/bin/env bash
# The hooked Transformers engine's image, orchestrator/transformers-hooked:VERSION, on the transformers-serve
# image (scripts/build-transformers-serve.sh builds that first). The context (the engine's package and the
# reference engine's server it reuses) is assembled in the cache dir; rebuilt only when a source changes.
# Usage: build-transformers-hooked.sh BASE_IMAGE
set -euo pipefail
base=${1:?usage: build-transformers-hooked.sh BASE_IMAGE}
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/common.sh"  # cache_dir, docker
log() { echo "[transformers-hooked] $*" >&2; }
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$root/arms/transformers-hooked/hookedengine/__init__.py")
image=orchestrator/transformers-hooked:$version
ctx=$cache_dir/transformers-hooked-$version
rm -rf "$ctx" && mkdir -p "$ctx"
cp "$root/arms/transformers-hooked/Dockerfile" "$ctx/"
for pkg in arms/transformers-hooked/hookedengine arms/reference-engine/refengine; do
  cp -r "$root/$pkg" "$ctx/"
done
find "$ctx" -name __pycache__ -prune -exec rm -rf {} +
stamp=$( { (cd "$ctx" && find . -type f ! -name image.stamp | sort | xargs sha256sum); \
  echo "$base $(docker image inspect -f '{{.Id}}' "$base")"; } | sha256sum | cut -c1-16)
if docker image inspect "$image" >/dev/null 2>&1 && [ "$(cat "$cache_dir/transformers-hooked.stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
log "Building $image (base $base)..."
DOCKER_BUILDKIT=1 docker build -q --build-arg "BASE_IMAGE=$base" -t "$image" "$ctx" >/dev/null \
  || { log "docker build of $image failed (run it without -q to see why)"; exit 1; }
echo "$stamp" > "$cache_dir/transformers-hooked.stamp"
log "Built $image"
